"""Paused jobs and bulk pauses as read and written (docs/pauses.md). Shapes and types only:
services/pauses.py checks the end of a pause, the tag and the approval, naming the field."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app.api.serializers.fields import StrictCharField, StrictSerializer
from scheduler_app.api.serializers.jobs import PauseSerializer
from scheduler_app.models import Job, PauseRequest


class PausedJobSerializer(serializers.ModelSerializer):
    """A paused job: why, who, since when (and how long), until when and what then."""

    paused_for_seconds = serializers.SerializerMethodField(help_text="How long it has been paused (null: unknown)")
    expired = serializers.SerializerMethodField(help_text="Its pause has an end, and the end has passed")

    class Meta:
        model = Job
        fields = (
            "id",
            "name",
            "tags",
            "paused_note",
            "paused_by",
            "paused_at",
            "paused_for_seconds",
            "paused_until",
            "pause_expiry",
            "expired",
            "pause_alerted_at",
            "auto_paused_at",
        )
        read_only_fields = fields

    def get_paused_for_seconds(self, job: Job) -> int | None:
        now = self.context["now"]
        return None if job.paused_at is None else max(0, int((now - job.paused_at).total_seconds()))

    def get_expired(self, job: Job) -> bool:
        return job.paused_until is not None and job.paused_until <= self.context["now"]


class PauseManySerializer(PauseSerializer):
    tag = StrictCharField(
        required=False, allow_blank=True, max_length=64, help_text="Pause the jobs with this tag; blank: every job"
    )


class PauseManyResultSerializer(serializers.Serializer):
    scope = serializers.CharField(help_text="tag:<tag>, or tenant (every job)")
    count = serializers.IntegerField(help_text="How many jobs were paused (0 while a request waits)")
    request = serializers.IntegerField(allow_null=True, help_text="The request waiting for a second person")
    fingerprint = serializers.CharField(allow_null=True, help_text="What its approval names")


class BulkPauseRequestSerializer(serializers.ModelSerializer):
    jobs = serializers.SerializerMethodField(help_text="How many jobs it pauses")

    class Meta:
        model = PauseRequest
        fields = (
            "id",
            "scope",
            "jobs",
            "job_ids",
            "fingerprint",
            "note",
            "paused_until",
            "pause_expiry",
            "requested_by",
            "requested_at",
            "state",
            "decided_by",
            "decided_at",
        )
        read_only_fields = fields

    def get_jobs(self, request: PauseRequest) -> int:
        return len(request.job_ids)


class ApproveSerializer(StrictSerializer):
    fingerprint = StrictCharField(max_length=16, help_text="The request's fingerprint, as its requester was told")
