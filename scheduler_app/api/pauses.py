"""Pauses over the API (docs/pauses.md): the tenant's paused jobs with why, who, since and
until when (GET paused/); a pause of a tag's or the whole tenant's jobs (POST pauses/), which
over CRONFLEET_BULK_PAUSE_APPROVAL_OVER jobs becomes a request; and the requests, approved
by a second caller naming their fingerprint (pause-requests/{id}/approve/) or refused."""

from __future__ import annotations

from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from scheduler_app.api import permissions as p
from scheduler_app.api.auth import actor
from scheduler_app.api.pagination import KeysetPagination
from scheduler_app.api.schema import extend_schema
from scheduler_app.api.serializers import validated
from scheduler_app.api.serializers.pauses import (
    ApproveSerializer,
    BulkPauseRequestSerializer,
    PausedJobSerializer,
    PauseManyResultSerializer,
    PauseManySerializer,
)
from scheduler_app.api.views import TenantScopedMixin
from scheduler_app.models import Job, PauseRequest, db_now
from scheduler_app.services import pauses

VIEW_PAUSEREQUEST = p.perm(PauseRequest, "view")
APPROVE_PAUSEREQUEST = f"{PauseRequest._meta.app_label}.approve_pauserequest"


class PausedJobsViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    """A list only (GET paused/), routed by hand: a viewset so that its page is documented as one."""

    queryset = Job.objects.filter(enabled=False)
    serializer_class = PausedJobSerializer
    pagination_class = KeysetPagination
    required_permissions = {"list": (p.VIEW_JOB,)}

    @extend_schema(summary="The tenant's paused jobs: why, who, since and until when")
    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        serializer = PausedJobSerializer(page, many=True, context={"now": db_now()})
        return self.get_paginated_response(serializer.data)


class PauseManyView(TenantScopedMixin, GenericAPIView):
    serializer_class = PauseManySerializer
    required_permissions = {"post": (p.OPERATE_JOB,)}

    @extend_schema(
        summary="Pause a tag's jobs or every job of the tenant (over the threshold: a request for a second person)",
        request=PauseManySerializer,
        responses={200: PauseManyResultSerializer, 202: PauseManyResultSerializer},
    )
    def post(self, request):
        data = validated(PauseManySerializer, request.data)
        scope = pauses.scope_of(tag=data.get("tag") or None)
        done = pauses.pause_bulk(
            self.tenant,
            scope=scope,
            note=data.get("note", ""),
            actor=actor(request),
            until=data["until"],
            on_expiry=data["on_expiry"],
        )
        waiting = done.request
        answer = {
            "scope": scope,
            "count": done.count,
            "request": waiting.id if waiting else None,
            "fingerprint": waiting.fingerprint if waiting else None,
        }
        code = status.HTTP_202_ACCEPTED if waiting is not None else status.HTTP_200_OK
        return Response(PauseManyResultSerializer(answer).data, status=code)


class PauseRequestViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    queryset = PauseRequest.objects.all()
    serializer_class = BulkPauseRequestSerializer
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    required_permissions = {
        "list": (VIEW_PAUSEREQUEST,),
        "retrieve": (VIEW_PAUSEREQUEST,),
        "approve": (APPROVE_PAUSEREQUEST, p.OPERATE_JOB),
        "refuse": (p.OPERATE_JOB,),  # pauses nothing: whoever may pause may refuse or withdraw
    }

    @extend_schema(summary="The tenant's bulk pause requests, waiting and decided")
    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(BulkPauseRequestSerializer(page, many=True).data)

    @extend_schema(summary="A bulk pause request")
    def retrieve(self, request, id=None):
        return Response(BulkPauseRequestSerializer(self.get_object()).data)

    @extend_schema(
        summary="Approve another caller's bulk pause, naming its fingerprint: its jobs are paused, "
        "unless the set of jobs changed since",
        request=ApproveSerializer,
        responses=BulkPauseRequestSerializer,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request, id=None):
        waiting = self.get_object()  # another tenant's request is not there (404), whatever the body
        data = validated(ApproveSerializer, request.data)
        done = pauses.pause_request_approve(
            waiting, fingerprint=data["fingerprint"], actor=actor(request), tenant=self.tenant
        )
        assert done.request is not None
        return Response(BulkPauseRequestSerializer(done.request).data)

    @extend_schema(
        summary="Refuse (or withdraw) a bulk pause request", request=None, responses=BulkPauseRequestSerializer
    )
    @action(detail=True, methods=["post"])
    def refuse(self, request, id=None):
        refused = pauses.pause_request_refuse(self.get_object(), actor=actor(request), tenant=self.tenant)
        return Response(BulkPauseRequestSerializer(refused).data)
