"""Fleet objectives: "99 % of tenant X's fires start within 60 s over 28 days", "99.5 % of the
runs of the jobs tagged billing succeed". One Objective a declaration, with the running tallies
the beats keep of its events (ledger/objectives.py); ObjectiveHour its events per hour, the
rollup its window is read from."""

from __future__ import annotations

from django.db import models

from scheduler_app.models.choices import TextChoices
from scheduler_app.models.tenants import Tenant


class ObjectiveKind(TextChoices):
    START = "start"  # scheduled fires that start within threshold_seconds of their fire time
    SUCCESS = "success"  # runs that end succeeded (of those that end succeeded, failed or dead)


# Services tell a name taken from other errors by these (a tenant's names, the fleet's).
OBJECTIVE_NAME_UNIQUE = "objective_name_unique_per_tenant"
OBJECTIVE_NAME_UNIQUE_FLEET_WIDE = "objective_name_unique_fleet_wide"


class Objective(models.Model):
    """A tenant's jobs (tenant set), the jobs with a tag (tag set; in every tenant when no
    tenant), or both. The tallies are written by ledger/objectives.count_events only: every
    event decided up to counted_until, once each, whatever beat counted it."""

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="objectives",
        help_text="Empty: every tenant's jobs (with a tag: the jobs with it in every tenant; staff only)",
    )
    name = models.CharField(max_length=64)
    tag = models.CharField(max_length=100, blank=True, default="", help_text="Only the jobs with this tag")
    kind = models.CharField(max_length=8, choices=ObjectiveKind.choices)
    threshold_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="start: a fire is good when it starts within this many seconds"
    )
    target = models.FloatField(help_text="The fraction of good events promised, e.g. 0.99")
    window_days = models.PositiveSmallIntegerField(default=28, help_text="The window the target holds over")
    created_at = models.DateTimeField()
    counted_until = models.DateTimeField()
    good_events = models.BigIntegerField(default=0)
    total_events = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name=OBJECTIVE_NAME_UNIQUE),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(tenant__isnull=True), name=OBJECTIVE_NAME_UNIQUE_FLEET_WIDE
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}" if self.tenant_id is not None else self.name


class ObjectiveHour(models.Model):
    """An objective's events decided in one hour (UTC): how many, and how many good."""

    # No index of its own: objectivehour_unique (objective, hour) leads with it.
    objective = models.ForeignKey(Objective, on_delete=models.CASCADE, related_name="hours", db_index=False)
    hour = models.DateTimeField()
    good = models.BigIntegerField(default=0)
    total = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["objective", "hour"], name="objectivehour_unique")]
