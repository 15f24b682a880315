"""Alerts over the API: a job's alert rule as a sub-resource of the job (GET, PUT replacing it,
PATCH changing the fields given, DELETE), and the alerts raised in the caller's tenant, newest
first. scheduler_app.alerts validates and writes (and records each change in the audit
trail); the serializers here check shapes and types only.
"""

from __future__ import annotations

from typing import ClassVar

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers, status, viewsets
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from scheduler_app import alerts
from scheduler_app.alerts.rules import MAX_SECONDS
from scheduler_app.api import permissions as p
from scheduler_app.api.auth import actor
from scheduler_app.api.errors import ApiError
from scheduler_app.api.pagination import KeysetPagination
from scheduler_app.api.schema import extend_schema
from scheduler_app.api.serializers import (
    INT64_MAX,
    ListQuerySerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    validated,
)
from scheduler_app.api.views import NO_CONTENT, TenantScopedMixin
from scheduler_app.models import Alert, AlertKind, AlertRule, Job

DAYS_366 = "366 days"


class StrictSecondsField(serializers.FloatField):
    """A JSON number of seconds (integer or not): not "30", not true."""

    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be a number of seconds"}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class AlertRuleWriteSerializer(StrictSerializer):
    read_only_names = ("job", "job_name", "last_success_at", "created_at", "updated_at")

    enabled = StrictBooleanField(
        required=False, help_text="false: the rule is kept but nothing is checked (PUT default: true)"
    )
    no_success_seconds = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_SECONDS,
        help_text=f"The dead-man's switch: expect a successful run at least this often, 1 s to {DAYS_366}; "
        "null: not watched (PUT default)",
    )
    grace_seconds = StrictIntegerField(
        required=False, max_value=MAX_SECONDS, help_text="... plus this much slack (PUT default: 0)"
    )
    on_failure = StrictBooleanField(
        required=False, help_text="Alert when a run ends failed or dead (PUT default: false)"
    )
    max_start_lag_seconds = StrictSecondsField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_SECONDS,
        help_text="Alert when a run starts later than this after its fire time (above 0); null: not watched",
    )
    max_duration_seconds = StrictSecondsField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_SECONDS,
        help_text="Alert when a run takes longer (above 0); null: not watched",
    )
    min_duration_seconds = StrictSecondsField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_SECONDS,
        help_text="Alert when a run succeeds faster (above 0, below max_duration_seconds); null: not watched",
    )
    webhook_url = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        trim_whitespace=False,
        help_text="POSTed each alert as signed JSON (the tenant's webhook secrets, as HTTP jobs); the same "
        "network guard as HTTP jobs; empty: none (PUT default)",
    )
    chat_url = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        trim_whitespace=False,
        help_text="A Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat), POSTed "
        '{"text": ...} for each alert; the same network guard as HTTP jobs; empty: none (PUT default)',
    )
    emails = serializers.ListField(
        child=StrictCharField(max_length=254),
        required=False,
        max_length=20,
        help_text="Addresses mailed each alert, at most CRONFLEET_ALERT_MAX_EMAILS_PER_RULE "
        "(10 unless the deployment says otherwise; never above 20) "
        "(PUT default: none)",
    )
    cooldown_seconds = StrictIntegerField(
        required=False,
        max_value=MAX_SECONDS,
        help_text="After an alert of one kind, further ones of that kind are counted, not sent, for this long; "
        "at least CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS (60 unless the deployment says otherwise) "
        "(PUT default: 3600)",
    )


class AlertRuleSerializer(serializers.ModelSerializer):
    job_name = serializers.CharField(source="job.name", read_only=True)

    class Meta:
        model = AlertRule
        fields = ("job", "job_name", *alerts.RULE_FIELDS, "last_success_at", "created_at", "updated_at")
        read_only_fields = fields


RULE_EXAMPLES = [
    OpenApiExample(
        "A daily job that must succeed, failures mailed",
        request_only=True,
        value={"no_success_seconds": 93600, "grace_seconds": 3600, "on_failure": True, "emails": ["ops@example.com"]},
    ),
    OpenApiExample(
        "Too slow or suspiciously fast, to a webhook",
        request_only=True,
        value={
            "max_duration_seconds": 600,
            "min_duration_seconds": 0.5,
            "webhook_url": "https://hooks.example.com/cron",
        },
    ),
]


class JobAlertRuleView(TenantScopedMixin, GenericAPIView):
    queryset = Job.objects.select_related("tenant")
    serializer_class = AlertRuleSerializer
    lookup_url_kwarg = "id"
    # PUT and PATCH make a rule (add_alertrule) or change one (change_alertrule): saved() asks which.
    required_permissions = {
        "get": (p.VIEW_ALERTRULE,),
        "put": (frozenset({p.ADD_ALERTRULE, p.CHANGE_ALERTRULE}),),
        "patch": (frozenset({p.ADD_ALERTRULE, p.CHANGE_ALERTRULE}),),
        "delete": (p.DELETE_ALERTRULE,),
    }

    def rule_of(self, job: Job) -> AlertRule:
        rule = AlertRule.objects.select_related("job").filter(job=job).first()
        if rule is None:
            raise ApiError("path", f"job {job.id} has no alert rule", status.HTTP_404_NOT_FOUND)
        return rule

    @extend_schema(summary="A job's alert rule (404 when it has none)", responses=AlertRuleSerializer)
    def get(self, request, id=None):
        return Response(AlertRuleSerializer(self.rule_of(self.get_object())).data)

    @extend_schema(
        summary="Set a job's alert rule as a whole: fields left out take their defaults",
        request=AlertRuleWriteSerializer,
        responses={200: AlertRuleSerializer, 201: AlertRuleSerializer},
        examples=RULE_EXAMPLES,
    )
    def put(self, request, id=None):
        job = self.get_object()  # first: another tenant's job is a 404 whatever the body
        values = validated(AlertRuleWriteSerializer, request.data)
        return self.saved(job, {**alerts.RULE_DEFAULTS, **values})

    @extend_schema(
        summary="Change the given fields of a job's alert rule (made with the defaults if it has none)",
        request=AlertRuleWriteSerializer,
        responses={200: AlertRuleSerializer, 201: AlertRuleSerializer},
        examples=RULE_EXAMPLES,
    )
    def patch(self, request, id=None):
        job = self.get_object()
        values = validated(AlertRuleWriteSerializer, request.data)
        return self.saved(job, dict(values))

    @extend_schema(summary="Delete a job's alert rule (its alerts stay listed)", responses={204: NO_CONTENT})
    def delete(self, request, id=None):
        job = self.get_object()
        if not alerts.rule_delete(job, actor=actor(request)):
            raise ApiError("path", f"job {job.id} has no alert rule", status.HTTP_404_NOT_FOUND)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def saved(self, job: Job, values: dict) -> Response:
        existed = AlertRule.objects.filter(job=job).exists()
        p.require(self.request, p.CHANGE_ALERTRULE if existed else p.ADD_ALERTRULE)
        rule = alerts.rule_set(job, values, actor=actor(self.request))
        rule.job = job
        return Response(
            AlertRuleSerializer(rule).data, status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED
        )


# --- alerts raised ------------------------------------------------------------------------


class DeliverySerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=["delivered", "pending", "failed", "suppressed", "no_channel"],
        help_text="pending: to be tried again; failed: gave up after "
        f"{alerts.DELIVERY_ATTEMPTS} attempts; suppressed: not sent, over "
        "the tenant's hourly alert or e-mail budget (the reason in "
        "last_error); no_channel: sent nowhere, its rule has no webhook, no chat hook and no e-mail",
    )
    sent_to = serializers.CharField(
        help_text="Where the last attempt went: 'webhook HOST', 'Slack hook at HOST', 'N e-mails', several of "
        "these, 'no channel', or ''"
    )
    delivered_at = serializers.DateTimeField(allow_null=True)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(
        allow_null=True, help_text="The last attempt's error, if it failed, or why it was suppressed"
    )


class AlertSerializer(serializers.ModelSerializer):
    job_ref = serializers.CharField(read_only=True, help_text="The job as TENANT/NAME")
    delivery = DeliverySerializer(read_only=True)

    class Meta:
        model = Alert
        fields = ("id", "kind", "message", "raised_at", "job", "job_ref", "run_id", "suppressed", "detail", "delivery")
        read_only_fields = fields


class AlertFilterSerializer(ListQuerySerializer):
    job = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX, help_text="Alerts of this job")
    kind = serializers.ChoiceField(choices=AlertKind.choices, required=False)
    delivered = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: delivered ones; false: pending, given up or suppressed",
    )


class AlertPagination(KeysetPagination):
    ordering = ("-raised_at", "-id")  # alert_tenant_recent_idx


class AlertViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    queryset = Alert.objects.select_related("job")
    serializer_class = AlertSerializer
    pagination_class = AlertPagination
    required_permissions = {"list": (p.VIEW_ALERT,)}

    @extend_schema(summary="The alerts raised in the tenant, newest first", parameters=[AlertFilterSerializer])
    def list(self, request):
        filters = validated(AlertFilterSerializer, request.query_params)
        found = self.get_queryset()
        if "job" in filters:
            self.own(Job, filters["job"], "job")
            found = found.filter(job_id=filters["job"])
        if "kind" in filters:
            found = found.filter(kind=filters["kind"])
        if filters["delivered"] is not None:
            found = found.filter(delivered_at__isnull=not filters["delivered"])
        page = self.paginate_queryset(found)
        for alert in page:
            alert.job_ref = f"{self.tenant.slug}/{alert.job.name}"
            alert.delivery = delivery_of(alert)
        return self.get_paginated_response(AlertSerializer(page, many=True).data)


def delivery_of(alert: Alert) -> dict:
    last = (alert.delivery_log or [{}])[-1].get("error")
    return {
        "status": alerts.delivery_status(alert),
        "sent_to": alerts.where_sent(alert),
        "delivered_at": alert.delivered_at,
        "attempts": alert.delivery_attempts,
        "next_attempt_at": alert.next_delivery_at,
        "last_error": None if alert.delivered_at else last,
    }
