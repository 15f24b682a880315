"""Runs in the API: the list and detail shapes (attempts, events) and the list filter."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app.api.serializers.fields import INT64_MAX, AwareDateTimeField, ListQuerySerializer
from scheduler_app.models import JobRun, RunState, Trigger

RUN_FIELDS = (
    "id",
    "job",
    "job_name",
    "scheduled_at",
    "trigger",
    "state",
    "attempt",
    "reason",
    "job_version",
    "priority",
    "created_at",
    "enqueued_at",
    "dispatched_at",
    "started_at",
    "finished_at",
    "next_attempt_at",
    "worker",
    "duplicate_deliveries",
    "parent_run",  # a chained run's parent run id (the run whose end started it); null for others
)


class RunSerializer(serializers.ModelSerializer):
    job_name = serializers.CharField(read_only=True)

    class Meta:
        model = JobRun
        fields = RUN_FIELDS
        read_only_fields = fields


class RunEventSerializer(serializers.Serializer):
    action = serializers.CharField()
    actor = serializers.CharField()
    detail = serializers.DictField()
    created_at = serializers.DateTimeField()


class AttemptSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    worker = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField()
    outcome = serializers.CharField(help_text="succeeded, failed, retrying, dead or lost")
    error = serializers.CharField(help_text="The first 500 characters of the attempt's error")


class RunDetailSerializer(RunSerializer):
    attempts = AttemptSerializer(
        many=True,
        read_only=True,
        help_text="Every finished attempt, oldest first (the current one is the run's own "
        "attempt, worker and started_at)",
    )
    events = RunEventSerializer(
        many=True,
        read_only=True,
        help_text="What the audit trail says of the run, oldest first: operator actions "
        "(replay, trigger) and anomalies (duplicate deliveries, stale writes, "
        "lost leases)",
    )

    class Meta(RunSerializer.Meta):
        fields = (
            *RUN_FIELDS,
            "heartbeat_at",
            "lease_expires_at",
            "celery_task_id",
            "result",
            "error",
            "attempts",
            "events",
        )
        read_only_fields = fields


class TriggeredRunSerializer(RunSerializer):
    publish_error = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="Set when the run is recorded but did not reach the broker (the beat's sweep publishes it again)",
    )

    class Meta(RunSerializer.Meta):
        fields = (*RUN_FIELDS, "publish_error")
        read_only_fields = fields


class RunFilterSerializer(ListQuerySerializer):
    job = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX, help_text="Runs of this job")
    state = serializers.ChoiceField(choices=RunState.choices, required=False)
    trigger = serializers.ChoiceField(choices=Trigger.choices, required=False)
    scheduled_after = AwareDateTimeField(required=False, help_text="Fire times strictly after this instant")
    scheduled_before = AwareDateTimeField(required=False, help_text="Fire times strictly before this instant")
