"""Maintenance windows: a tenant's (or, with no tenant, the whole deployment's) times during
which the fires of the jobs they select are skipped or deferred to the window's end, and
running runs let finish or cancelled. The times are the pure schedules.windows.WindowTimes."""

from __future__ import annotations

from datetime import timedelta

from django.db import models

from scheduler_app.models.choices import TextChoices
from scheduler_app.models.tenants import Tenant
from scheduler_app.schedules.windows import WindowTimes


class WindowAction(TextChoices):
    SKIP = "skip"  # a fire inside the window is recorded as skipped
    DEFER = "defer"  # fires inside are skipped and one coalesced run fires at the window's end


class RunningPolicy(TextChoices):
    LET_FINISH = "let_finish"
    CANCEL = "cancel"  # runs of the selected jobs still running while the window is open are cancelled


# Services tell a name taken from other errors by these (a tenant's names, the deployment's).
WINDOW_NAME_UNIQUE = "window_name_unique_per_tenant"
WINDOW_NAME_UNIQUE_DEPLOYMENT_WIDE = "window_name_unique_deployment_wide"


class MaintenanceWindow(models.Model):
    """One-off (starts_at, ends_at) or recurring (cron in `zone`, duration_minutes); the
    selector is `tags` (any of them) and `target_kinds`; both empty select every job."""

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="maintenance_windows",
        help_text="Empty: the whole deployment's window (staff only)",
    )
    name = models.CharField(max_length=64)
    description = models.CharField(max_length=500, blank=True, default="", db_default="")
    zone = models.CharField(
        max_length=64,
        default="UTC",
        db_default="UTC",
        help_text="IANA zone the recurring window's cron expression is read in",
    )
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    cron = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="A recurring window opens at each fire of this expression",
    )
    duration_minutes = models.PositiveIntegerField(null=True, blank=True)
    action = models.CharField(
        max_length=8, choices=WindowAction.choices, default=WindowAction.SKIP, db_default=WindowAction.SKIP
    )
    running_policy = models.CharField(
        max_length=12,
        choices=RunningPolicy.choices,
        default=RunningPolicy.LET_FINISH,
        db_default=RunningPolicy.LET_FINISH,
    )
    tags = models.JSONField(
        default=list,
        blank=True,
        db_default=models.Value([], models.JSONField()),
        help_text="Jobs with any of these tags (empty: any job)",
    )
    target_kinds = models.JSONField(
        default=list,
        blank=True,
        db_default=models.Value([], models.JSONField()),
        help_text="Jobs of these target kinds: task, http, command, sql (empty: any)",
    )
    enabled = models.BooleanField(default=True, db_default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name=WINDOW_NAME_UNIQUE),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(tenant__isnull=True), name=WINDOW_NAME_UNIQUE_DEPLOYMENT_WIDE
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def times(self) -> WindowTimes:
        return WindowTimes(
            zone=self.zone,
            starts_at=self.starts_at,
            ends_at=self.ends_at,
            cron=self.cron,
            duration=timedelta(minutes=self.duration_minutes or 0),
        )
