"""The retention of finished runs, as a sub-resource of a tenant (staff) and of a job (the
tenant's own callers): GET shows what is set and what is in force; PATCH sets fields, null
clearing one so that it is inherited again. scheduler_app.ledger.retention validates and writes.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from scheduler_app import services
from scheduler_app.api import permissions as p
from scheduler_app.api.auth import IsStaffCaller, actor
from scheduler_app.api.schema import extend_schema
from scheduler_app.api.serializers import StrictIntegerField, StrictSerializer, validated
from scheduler_app.api.views import ApiViewMixin, TenantScopedMixin
from scheduler_app.ledger import policy as retention_policy
from scheduler_app.models import Job, Tenant

INHERIT = "null: inherited ({})"


class EffectiveRetentionSerializer(serializers.Serializer):
    days = serializers.IntegerField(help_text="Days a finished run is kept (0: forever)")
    failed_days = serializers.IntegerField(help_text="Days a failed or dead run is kept (0: forever)")
    keep_last = serializers.IntegerField(help_text="A job's newest runs kept whatever their age (0: none)")
    sources = serializers.DictField(
        child=serializers.ChoiceField(choices=["job", "tenant", "settings"]),
        help_text="Where each value comes from: job, tenant or settings",
    )


class RetentionSerializer(serializers.Serializer):
    retention_days = serializers.IntegerField(allow_null=True, help_text="Set here; null: inherited")
    retention_failed_days = serializers.IntegerField(allow_null=True, help_text="Set here; null: inherited")
    retention_keep_last = serializers.IntegerField(allow_null=True, help_text="Set here; null: inherited")
    effective = EffectiveRetentionSerializer(help_text="The policy in force")


def change_serializer(name: str, inherited_from: str) -> type[StrictSerializer]:
    fields = {
        "retention_days": StrictIntegerField(
            allow_null=True,
            required=False,
            help_text=f"Days a finished run is kept after it finished, 0-{retention_policy.LIMITS['retention_days']} "
            f"(0: forever); {INHERIT.format(inherited_from)}",
        ),
        "retention_failed_days": StrictIntegerField(
            allow_null=True,
            required=False,
            help_text=f"Days a failed or dead run is kept, at least retention_days, "
            f"0-{retention_policy.LIMITS['retention_failed_days']} (0: forever); {INHERIT.format(inherited_from)}",
        ),
        "retention_keep_last": StrictIntegerField(
            allow_null=True,
            required=False,
            help_text=f"A job's newest runs kept whatever their age, 0-{retention_policy.LIMITS['retention_keep_last']} "
            f"(0: none); {INHERIT.format(inherited_from)}",
        ),
    }
    return type(name, (StrictSerializer,), fields)


TenantRetentionChangeSerializer = change_serializer("TenantRetentionChangeSerializer", "CRONFLEET_RETENTION_*")
JobRetentionChangeSerializer = change_serializer("JobRetentionChangeSerializer", "the tenant's")
EXAMPLES = [
    OpenApiExample(
        "Keep a week, failures a month", request_only=True, value={"retention_days": 7, "retention_failed_days": 30}
    ),
    OpenApiExample("Always keep the last 100 runs", request_only=True, value={"retention_keep_last": 100}),
    OpenApiExample("Inherit the days again", request_only=True, value={"retention_days": None}),
]


class TenantRetentionView(ApiViewMixin, GenericAPIView):
    permission_classes = (IsStaffCaller,)
    queryset = Tenant.objects.all()
    serializer_class = RetentionSerializer
    lookup_field = "slug"
    required_permissions = {"get": (p.VIEW_TENANT,), "patch": (p.CHANGE_TENANT, p.CHANGE_TENANT_QUOTAS)}

    @extend_schema(summary="A tenant's retention of finished runs (staff)", responses=RetentionSerializer)
    def get(self, request, slug=None):
        return Response(RetentionSerializer(retention_policy.describe(self.get_object())).data)

    @extend_schema(
        summary="Set a tenant's retention of finished runs; null inherits the setting (staff)",
        request=TenantRetentionChangeSerializer,
        responses=RetentionSerializer,
        examples=EXAMPLES,
    )
    def patch(self, request, slug=None):
        tenant = self.get_object()  # first: someone else's object is a 404 whatever the body
        changes = validated(TenantRetentionChangeSerializer, request.data)
        tenant = services.tenant_set_retention(tenant, changes, actor=actor(request))
        return Response(RetentionSerializer(retention_policy.describe(tenant)).data)


class JobRetentionView(TenantScopedMixin, GenericAPIView):
    queryset = Job.objects.select_related("tenant")
    serializer_class = RetentionSerializer
    lookup_url_kwarg = "id"
    required_permissions = {"get": (p.VIEW_JOB,), "patch": (p.CHANGE_JOB,)}  # as the admin's job page

    @extend_schema(summary="A job's retention of finished runs", responses=RetentionSerializer)
    def get(self, request, id=None):
        return Response(RetentionSerializer(retention_policy.describe(self.get_object())).data)

    @extend_schema(
        summary="Set a job's retention of finished runs; null inherits the tenant's",
        request=JobRetentionChangeSerializer,
        responses=RetentionSerializer,
        examples=EXAMPLES,
    )
    def patch(self, request, id=None):
        job = self.get_object()  # first: another tenant's job is a 404 whatever the body
        changes = validated(JobRetentionChangeSerializer, request.data)
        job = services.job_set_retention(job, changes, actor=actor(request))
        return Response(RetentionSerializer(retention_policy.describe(job)).data)
