"""API views: thin, each one a service call between a request serializer and a response one.

Tenant isolation lives in TenantScopedMixin and nowhere else: it resolves the caller's
tenant once per request and every queryset of a tenant-scoped view is filtered by it, so
another tenant's job, run or key is simply not there (404). Ids of other objects named in
bodies or filters are checked with own().
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F
from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotAuthenticated
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response

from scheduler_app import services
from scheduler_app.api import handler
from scheduler_app.api import permissions as p
from scheduler_app.api import serializers as s
from scheduler_app.api.auth import (
    BearerKeyAuthentication,
    IsApiCaller,
    StaffSessionAuthentication,
    actor,
    api_key,
    is_staff_caller,
    is_staff_session,
)
from scheduler_app.api.errors import ApiError
from scheduler_app.api.pagination import KeysetPagination, RunPagination
from scheduler_app.api.parsers import StrictJSONParser, check_body_headers
from scheduler_app.api.renderers import JSONRenderer
from scheduler_app.api.schema import ApiSchema, extend_schema
from scheduler_app.api.throttling import KeyRateThrottle, rate_limit_headers
from scheduler_app.ledger import checkstatus, stats
from scheduler_app.models import AuditEvent, Job, JobRun, Tenant, db_now

TENANT_HEADER = "X-Cronfleet-Tenant"
MAX_RUN_EVENTS = 500

NO_CONTENT = OpenApiResponse(description="Done; no body")
JOB_EXAMPLES = [
    OpenApiExample(
        "A nightly task",
        request_only=True,
        value={
            "name": "nightly-report",
            "tags": ["reports"],
            "schedule": {"cron": "0 3 * * *", "timezone": "Europe/Paris"},
            "target": {"kind": "task", "task": "scheduler_app.echo", "args": [], "kwargs": {"day": "yesterday"}},
            "max_attempts": 5,
            "misfire_policy": "run_once",
            "overlap_policy": "skip",
        },
    ),
    OpenApiExample(
        "A webhook every five minutes",
        request_only=True,
        value={
            "name": "ping",
            "schedule": {"every": 300},
            "target": {
                "kind": "http",
                "method": "POST",
                "url": "https://hooks.example.com/cron",
                "headers": {"X-Team": "ops"},
                "body": "{}",
            },
        },
    ),
    OpenApiExample(
        "Once, at an instant",
        request_only=True,
        value={
            "name": "launch",
            "schedule": {"at": "2030-01-01T09:00:00+01:00"},
            "target": {"kind": "task", "task": "scheduler_app.echo"},
        },
    ),
]
CHANGE_EXAMPLES = [
    OpenApiExample("Move to 04:30 in the job's zone", request_only=True, value={"schedule": {"cron": "30 4 * * *"}}),
    OpenApiExample("Rename and retag", request_only=True, value={"name": "renamed", "tags": ["nightly"]}),
]


WARNING_HEADER = "Warning"


def warning_value(text: str) -> str:
    """`text` as an RFC 7234 Warning (code 299, a persistent miscellaneous warning): a
    quoted string, with quotes and backslashes escaped and any non-ASCII character as a backslash escape."""
    quoted = text.replace("\\", "\\\\").replace('"', '\\"').encode("ascii", "backslashreplace").decode("ascii")
    return f'299 - "{quoted}"'


class ApiViewMixin:
    """What every API view is and does. It names its own policies, so that a host project's
    REST_FRAMEWORK (AllowAny, SessionAuthentication, BasicAuthentication, other parsers,
    renderers, throttles, filters, versioning, exception handler) changes nothing here: who
    may call is decided by a key or an active staff session (auth.py) and nothing else. First
    it refuses an oversized or untyped body unread; last it tells the caller where it stands
    with the rate limit."""

    authentication_classes = (BearerKeyAuthentication, StaffSessionAuthentication)
    permission_classes = (IsApiCaller,)  # some views narrow it to IsStaffCaller
    parser_classes = (StrictJSONParser,)
    renderer_classes = (JSONRenderer,)
    throttle_classes = (KeyRateThrottle,)
    content_negotiation_class = DefaultContentNegotiation
    metadata_class = None  # no OPTIONS metadata: nothing answers a method it does not document
    versioning_class = None  # the version is in the path the host mounts: /api/v1/
    filter_backends = ()  # get_object() would apply a host's default filters (?search=, ?ordering=)
    pagination_class = None  # the views that list name theirs
    schema = ApiSchema()
    # routing.API_VIEW: marks the view's routes as the API's, so errors answer JSON under any prefix.
    cronfleet_api = True

    def get_exception_handler(self):
        return handler.handle_exception

    def initial(self, request, *args, **kwargs):
        check_body_headers(request)
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        for name, value in rate_limit_headers(request).items():
            response[name] = value
        return response


def caller_tenant(request) -> Tenant:
    """The tenant a request acts inside: a tenant key's own, or for staff (a staff key or a
    staff session) the one named by the X-Cronfleet-Tenant header. Anyone else is refused
    here too, not taken for staff for want of a key: the permission classes refuse them
    first, and this does not depend on it."""
    key = api_key(request)
    named = request.headers.get(TENANT_HEADER)
    if key is not None and not key.is_staff:
        if named is not None and named != key.tenant.slug:
            raise ApiError(TENANT_HEADER, "a tenant key acts only for its own tenant", status.HTTP_403_FORBIDDEN)
        return key.tenant
    if key is None and not is_staff_session(request):
        raise NotAuthenticated("needs an API key or a staff session")
    if not named:
        raise ApiError(TENANT_HEADER, "staff callers name the tenant they act for (its slug) in this header")
    return services.tenant_by_slug(named, field=TENANT_HEADER)


class TenantScopedMixin(ApiViewMixin):
    """Scopes a view to the caller's tenant. The one place isolation is enforced."""

    acts_for_tenant = True  # schema.ApiSchema documents the X-Cronfleet-Tenant header

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.tenant = caller_tenant(request)

    def get_queryset(self):
        queryset = super().get_queryset()
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request, no tenant
            return queryset.none()
        return queryset.filter(tenant=self.tenant)

    def own(self, model, pk: int, field: str) -> None:
        """Refuse an id from a body or filter unless it is one of the tenant's (400, not data)."""
        if not model.objects.filter(tenant=self.tenant, pk=pk).exists():
            raise ApiError(field, "not found")


class DeploymentScopedMixin(ApiViewMixin):
    """A view of objects that are a tenant's or the whole deployment's (tenant NULL: maintenance
    windows, fleet objectives). A staff caller naming no tenant (X-Cronfleet-Tenant) acts on the
    deployment's own (self.tenant None); every other caller on its tenant's. Each view's
    get_queryset says which of the two it lists, through scoped()."""

    acts_for_tenant = True  # schema.ApiSchema documents the X-Cronfleet-Tenant header

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.staff = is_staff_caller(request)
        self.tenant = None if self.staff and not request.headers.get(TENANT_HEADER) else caller_tenant(request)

    def scoped(self, queryset):
        """The deployment's objects for a staff caller naming no tenant, else None: the view
        narrows `queryset` to the tenant's itself. None of them at schema generation."""
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request, no tenant
            return queryset.none()
        return queryset.filter(tenant__isnull=True) if self.tenant is None else None


def page_of(view, queryset, serializer_class) -> Response:
    page = view.paginate_queryset(queryset)
    return view.get_paginated_response(serializer_class(page, many=True).data)


# --- jobs -------------------------------------------------------------------------------


class JobScopedMixin(TenantScopedMixin):
    """Job views report service fields at their place in the job's representation."""

    api_field = staticmethod(s.api_field)


# Each bulk action needs what the admin asks for the same on one job.
BULK_PERMISSIONS = {"pause": p.OPERATE_JOB, "resume": p.OPERATE_JOB, "delete": p.DELETE_JOB}


class JobViewSet(JobScopedMixin, viewsets.GenericViewSet):
    queryset = Job.objects.select_related("calendar", "after_job")
    serializer_class = s.JobSerializer
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    required_permissions = {
        "list": (p.VIEW_JOB,),
        "retrieve": (p.VIEW_JOB,),
        "preview": (p.VIEW_JOB,),
        "impact": (p.VIEW_JOB,),  # a POST that saves nothing
        "create": (p.ADD_JOB,),
        "partial_update": (p.CHANGE_JOB,),
        "destroy": (p.DELETE_JOB,),
        "pause": (p.OPERATE_JOB,),
        "resume": (p.OPERATE_JOB,),
        "trigger": (p.OPERATE_JOB,),
        "backfill": (p.OPERATE_JOB,),  # a dry run too, as on the admin's job page
        "bulk": (frozenset(BULK_PERMISSIONS.values()),),
    }

    @extend_schema(summary="The tenant's jobs, by id", parameters=[s.JobFilterSerializer])
    def list(self, request):
        filters = s.validated(s.JobFilterSerializer, request.query_params)
        jobs = checkstatus.with_check_fields(self.get_queryset())  # checkin_status in the page's one statement
        if "tag" in filters:
            jobs = jobs.tagged(filters["tag"])
        if filters["enabled"] is not None:
            jobs = jobs.filter(enabled=filters["enabled"])
        if "name" in filters:
            jobs = jobs.filter(name=filters["name"])
        return page_of(self, jobs, s.JobSerializer)

    @extend_schema(summary="A job")
    def retrieve(self, request, id=None):
        return Response(s.JobSerializer(self.get_object()).data)

    @extend_schema(
        summary="Create a job", request=s.JobWriteSerializer, responses={201: s.JobSerializer}, examples=JOB_EXAMPLES
    )
    def create(self, request):
        data = s.validated(s.JobWriteSerializer, request.data)
        job = services.job_create(self.tenant, services.JobSpec(**s.spec_fields(data)), actor=actor(request))
        return Response(s.JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a job (validated as a whole; the version is bumped, and next_run_at "
        "recomputed when the schedule changes)",
        request=s.JobWriteSerializer,
        responses=s.JobSerializer,
        examples=CHANGE_EXAMPLES,
    )
    def partial_update(self, request, id=None):
        job = self.get_object()
        changes = s.spec_fields(s.validated(s.JobWriteSerializer, request.data, partial=True))
        version = job.version
        job = services.job_update(job, changes, actor=actor(request))
        response = Response(s.JobSerializer(job).data)
        if job.version != version and (warning := services.drift_warning(job, actor(request))):
            response[WARNING_HEADER] = warning_value(warning)  # saved, as drift of a job managed as code
        return response

    @extend_schema(summary="Delete a job and its runs", responses={204: NO_CONTENT})
    def destroy(self, request, id=None):
        services.job_delete(self.get_object(), actor=actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Pause a job (it stops firing; missed fires are recorded once on resume)",
        request=s.PauseSerializer,
        responses=s.JobSerializer,
    )
    @action(detail=True, methods=["post"])
    def pause(self, request, id=None):
        job = self.get_object()
        data = s.validated(s.PauseSerializer, request.data)
        job = services.job_pause(
            job, note=data.get("note", ""), actor=actor(request), until=data["until"], on_expiry=data["on_expiry"]
        )
        return Response(s.JobSerializer(job).data)

    @extend_schema(summary="Resume a paused job from now", request=None, responses=s.JobSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request, id=None):
        return Response(s.JobSerializer(services.job_resume(self.get_object(), actor=actor(request))).data)

    @extend_schema(
        summary="Run the job now: a manual run, recorded and queued",
        request=None,
        responses={201: s.TriggeredRunSerializer},
    )
    @action(detail=True, methods=["post"])
    def trigger(self, request, id=None):
        job = self.get_object()
        run, publish_error = services.job_trigger_reporting(job, actor=actor(request))
        run.job_name = job.name
        run.publish_error = None if publish_error is None else str(publish_error)
        return Response(s.TriggeredRunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="The job's next fires, in UTC and in its zone, DST anomalies flagged",
        parameters=[s.PreviewQuerySerializer],
        responses=s.PreviewSerializer,
    )
    @action(detail=True, methods=["get"])
    def preview(self, request, id=None):
        job = self.get_object()
        count = s.validated(s.PreviewQuerySerializer, request.query_params)["count"]
        fires = services.schedule_preview(job.schedule, count=count)
        return Response(
            s.PreviewSerializer({"timezone": job.timezone, "fires": fires, "placement": job.flex_note or None}).data
        )

    @extend_schema(
        summary="What a PATCH with this body would do to the job's fires (nothing is saved)",
        request=s.JobWriteSerializer,
        responses=s.ImpactSerializer,
        examples=CHANGE_EXAMPLES,
    )
    @action(detail=True, methods=["post"])
    def impact(self, request, id=None):
        job = self.get_object()
        changes = s.spec_fields(s.validated(s.JobWriteSerializer, request.data, partial=True))
        return Response(s.ImpactSerializer(services.job_update_impact(job, changes)).data)

    @extend_schema(
        summary="Record runs for the job's past fires in [start, end] that have none "
        "(dry_run, the default, only lists them)",
        request=s.BackfillSerializer,
        responses=s.BackfillResultSerializer,
        examples=[
            OpenApiExample(
                "Yesterday, as a dry run",
                request_only=True,
                value={"start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z", "dry_run": True},
            )
        ],
    )
    @action(detail=True, methods=["post"])
    def backfill(self, request, id=None):
        job = self.get_object()
        data = s.validated(s.BackfillSerializer, request.data)
        result = services.job_backfill(
            job, start=data["start"], end=data["end"], dry_run=data["dry_run"], actor=actor(request)
        )
        return Response(s.BackfillResultSerializer(result).data)

    @extend_schema(
        summary="Pause, resume or delete every job carrying a tag (a pause over "
        "CRONFLEET_BULK_PAUSE_APPROVAL_OVER jobs: 202, a request for a second person)",
        request=s.BulkSerializer,
        responses={200: s.BulkResultSerializer, 202: s.BulkResultSerializer},
        examples=[
            OpenApiExample(
                "Pause a batch", request_only=True, value={"tag": "reports", "action": "pause", "note": "maintenance"}
            )
        ],
    )
    @action(detail=False, methods=["post"])
    def bulk(self, request):
        data = s.validated(s.BulkSerializer, request.data)
        p.require(request, BULK_PERMISSIONS[data["action"]])
        done = services.jobs_bulk(
            self.tenant,
            tag=data["tag"],
            action=data["action"],
            note=data.get("note", ""),
            actor=actor(request),
            until=data["until"],
            on_expiry=data["on_expiry"],
        )
        waiting = done.request
        answer = {"tag": data["tag"], "action": data["action"], "count": done.count}
        if waiting is not None:  # over CRONFLEET_BULK_PAUSE_APPROVAL_OVER: a second person approves it
            answer.update(request=waiting.id, fingerprint=waiting.fingerprint)
        code = status.HTTP_202_ACCEPTED if waiting is not None else status.HTTP_200_OK
        return Response(s.BulkResultSerializer(answer).data, status=code)


class SchedulePreviewView(JobScopedMixin, GenericAPIView):
    serializer_class = s.SchedulePreviewSerializer
    required_permissions = {"post": (p.VIEW_JOB,)}  # saves nothing

    @extend_schema(
        summary="The next fires of a schedule not saved yet (cron read in the tenant's zone by default)",
        request=s.SchedulePreviewSerializer,
        responses=s.PreviewSerializer,
        examples=[
            OpenApiExample(
                "Across a DST change",
                request_only=True,
                value={
                    "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
                    "count": 3,
                    "start_at": "2030-03-29T00:00:00Z",
                },
            )
        ],
    )
    def post(self, request):
        data = s.validated(s.SchedulePreviewSerializer, request.data)
        fields = s.spec_fields(data)
        spec = services.JobSpec(
            name="",
            start_at=data.get("start_at"),
            end_at=data.get("end_at"),
            **{
                key: fields[key]
                for key in ("cron", "timezone", "every", "at", "flex_window", "flex_scope")
                if key in fields
            },
        )
        placement = None
        if spec.flex_window:  # where a job with this window would be placed now (nothing is saved)
            # A tenant's queue-scoped preview counts its own jobs only; staff see the whole queue.
            spec, flex = services.spec_placed(self.tenant, spec, db_now(), across_tenants=is_staff_caller(request))
            placement = flex["flex_note"]
        schedule = services.spec_schedule(self.tenant, spec)
        fires = services.schedule_preview(schedule, count=data["count"])
        return Response(
            s.PreviewSerializer({"timezone": schedule.timezone, "fires": fires, "placement": placement}).data
        )


# --- runs -------------------------------------------------------------------------------


class RunViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    queryset = JobRun.objects.annotate(job_name=F("job__name"))
    serializer_class = s.RunSerializer
    pagination_class = RunPagination
    lookup_url_kwarg = "id"
    required_permissions = {
        "list": (p.VIEW_JOBRUN,),
        "retrieve": (p.VIEW_JOBRUN,),
        "replay": (p.OPERATE_JOB,),
    }  # the admin's replay button asks change_job

    @extend_schema(summary="The tenant's runs, newest fire time first", parameters=[s.RunFilterSerializer])
    def list(self, request):
        filters = s.validated(s.RunFilterSerializer, request.query_params)
        runs = self.get_queryset().defer("result", "error")
        if "job" in filters:
            self.own(Job, filters["job"], "job")
            runs = runs.filter(job_id=filters["job"])
        for name in ("state", "trigger"):
            if name in filters:
                runs = runs.filter(**{name: filters[name]})
        if "scheduled_after" in filters:
            runs = runs.filter(scheduled_at__gt=filters["scheduled_after"])
        if "scheduled_before" in filters:
            runs = runs.filter(scheduled_at__lt=filters["scheduled_before"])
        return page_of(self, runs, s.RunSerializer)

    @extend_schema(summary="A run, with its result, error and history", responses=s.RunDetailSerializer)
    def retrieve(self, request, id=None):
        run = self.get_object()
        run.events = AuditEvent.objects.filter(tenant=self.tenant, run_id=run.id).order_by("id")[:MAX_RUN_EVENTS]
        return Response(s.RunDetailSerializer(run).data)

    @extend_schema(
        summary="Queue a failed or dead run again as its next attempt", request=None, responses=s.RunSerializer
    )
    @action(detail=True, methods=["post"])
    def replay(self, request, id=None):
        run = services.run_replay(self.get_object(), actor=actor(request))  # keeps the job_name annotation
        return Response(s.RunSerializer(run).data)


# --- stats ------------------------------------------------------------------------------


class StatsView(TenantScopedMixin, GenericAPIView):
    serializer_class = s.StatsSerializer
    required_permissions = {"get": (p.VIEW_JOBRUN,)}

    def initial(self, request, *args, **kwargs):
        # ?all_tenants=true: staff only, and no tenant to act for (stats.run_stats(None, ...)).
        super(TenantScopedMixin, self).initial(request, *args, **kwargs)
        self.query = s.validated(s.StatsQuerySerializer, request.query_params)
        if not self.query["all_tenants"]:
            self.tenant = caller_tenant(request)
        elif is_staff_caller(request):
            self.tenant = None
        else:
            raise ApiError("all_tenants", "only staff callers see every tenant's runs", status.HTTP_403_FORBIDDEN)

    @extend_schema(
        summary="Runs by state, dispatch and start lag percentiles, failure rate over a recent window",
        parameters=[s.StatsQuerySerializer],
        responses=s.StatsSerializer,
    )
    def get(self, request):
        window = self.query["window"]
        found = stats.run_stats(self.tenant and self.tenant.id, window=timedelta(seconds=window), now=db_now())
        tenant = self.tenant and self.tenant.slug
        return Response(s.StatsSerializer({"window_seconds": window, "tenant": tenant, **found}).data)
