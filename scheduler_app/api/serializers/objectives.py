"""A fleet objective as written and as read. Shapes and types only: the services
(services/objectives.py) check the kind, threshold, target and window and name the field."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app.api.serializers.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
)
from scheduler_app.models import Objective


class ObjectiveWriteSerializer(StrictSerializer):
    """An objective as declared (it is never changed: remove it and declare another)."""

    read_only_names = ("id", "tenant", "window", "created_at", "counted_until", "good_events", "total_events")

    name = StrictCharField(max_length=64, trim_whitespace=False)
    fleet = StrictBooleanField(required=False, help_text="An objective over every tenant's jobs (staff callers only)")
    kind = StrictCharField(help_text="start (fires that start within threshold_seconds) or success (runs that succeed)")
    threshold_seconds = StrictIntegerField(
        required=False, allow_null=True, help_text="start: a good fire starts within this many seconds"
    )
    target = serializers.JSONField(help_text='The fraction of good events promised: 0.995, or "99.5%"')
    tag = StrictCharField(required=False, allow_blank=True, max_length=100, help_text="Only the jobs with this tag")
    window_days = StrictIntegerField(required=False, help_text="The window the target holds over (default 28)")


class ObjectiveSerializer(serializers.ModelSerializer):
    tenant = serializers.SerializerMethodField(help_text="The tenant's slug; null for a fleet-wide objective")
    window = serializers.SerializerMethodField(
        help_text="Over the window: good and total events, attainment (null with no event), budget_left "
        "(1 untouched, 0 spent, below 0 overspent)"
    )

    class Meta:
        model = Objective
        fields = (
            "id",
            "name",
            "tenant",
            "tag",
            "kind",
            "threshold_seconds",
            "target",
            "window_days",
            "window",
            "good_events",
            "total_events",
            "counted_until",
            "created_at",
        )
        read_only_fields = fields

    def get_tenant(self, objective: Objective) -> str | None:
        return objective.tenant.slug if objective.tenant_id is not None else None

    def get_window(self, objective: Objective) -> dict:
        found = self.context["windows"][objective.id]
        return {
            "good": found.good,
            "total": found.total,
            "attainment": found.attainment,
            "budget_left": found.budget_left,
        }
