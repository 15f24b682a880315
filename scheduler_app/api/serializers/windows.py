"""A maintenance window as written and as read. Shapes and types only: the services
(services/windows.py) check the zone, times, cron, action and selector and name the field."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app.api.serializers.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
)
from scheduler_app.models import MaintenanceWindow
from scheduler_app.schedules.windows import next_opening
from scheduler_app.services.windows import MAX_DURATION_MINUTES


class WindowWriteSerializer(StrictSerializer):
    """A window as written: all of it to create, any part of it to PATCH."""

    read_only_names = ("id", "tenant", "open_until", "next_opening", "created_at", "updated_at")

    name = StrictCharField(max_length=64, trim_whitespace=False)
    deployment = StrictBooleanField(
        required=False, help_text="A window of the whole deployment (staff callers only; given when it is made)"
    )
    description = StrictCharField(required=False, allow_blank=True, max_length=500)
    zone = StrictCharField(
        required=False,
        max_length=64,
        help_text="IANA zone (default UTC): a recurring window's "
        "cron is read in it, and so are times without an offset",
    )
    starts_at = StrictCharField(
        required=False, allow_null=True, max_length=40, help_text="A one-off window's start, ISO 8601"
    )
    ends_at = StrictCharField(
        required=False, allow_null=True, max_length=40, help_text="A one-off window's end, ISO 8601"
    )
    cron = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="A recurring window opens at each fire of this expression, in its zone",
    )
    duration_minutes = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_DURATION_MINUTES,
        help_text="How long a recurring window stays open",
    )
    action = StrictCharField(
        required=False,
        help_text="skip (the default) or defer: the fires inside coalesce into one run at the window's end",
    )
    running_policy = StrictCharField(
        required=False,
        help_text="let_finish (the default) or cancel: runs of the selected jobs still running are cancelled",
    )
    tags = serializers.ListField(
        child=serializers.JSONField(), required=False, help_text="Jobs with any of these tags (empty: any job)"
    )
    target_kinds = serializers.ListField(
        child=serializers.JSONField(), required=False, help_text="Jobs of these target kinds (empty: any)"
    )
    enabled = StrictBooleanField(required=False)


class WindowSerializer(serializers.ModelSerializer):
    action = serializers.CharField(read_only=True, help_text="skip or defer")
    running_policy = serializers.CharField(read_only=True, help_text="let_finish or cancel")
    tenant = serializers.SerializerMethodField(help_text="The tenant's slug; null for a deployment-wide window")
    open_until = serializers.SerializerMethodField(help_text="While the window is open: when it closes")
    next_opening = serializers.SerializerMethodField(help_text="When it opens next, when it is closed")

    class Meta:
        model = MaintenanceWindow
        fields = (
            "id",
            "name",
            "tenant",
            "description",
            "zone",
            "starts_at",
            "ends_at",
            "cron",
            "duration_minutes",
            "action",
            "running_policy",
            "tags",
            "target_kinds",
            "enabled",
            "open_until",
            "next_opening",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    def get_tenant(self, window: MaintenanceWindow) -> str | None:
        return window.tenant.slug if window.tenant_id is not None else None

    def _interval(self, window: MaintenanceWindow):
        now = self.context.get("now")
        return (now, next_opening(window.times, now)) if now is not None else (None, None)

    def get_open_until(self, window: MaintenanceWindow) -> str | None:
        now, found = self._interval(window)
        return found[1].isoformat() if found and found[0] <= now else None

    def get_next_opening(self, window: MaintenanceWindow) -> str | None:
        now, found = self._interval(window)
        return found[0].isoformat() if found and found[0] > now else None
