"""The audit trail: operator actions and anomalies, read-only."""

from __future__ import annotations

import json

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from scheduler_app.admin.common import ReadOnlyAdmin
from scheduler_app.management.tables import shorten
from scheduler_app.models import AuditEvent


class ActionFilter(admin.SimpleListFilter):
    """Known actions, without a SELECT DISTINCT over the whole audit trail."""

    title = "action"
    parameter_name = "action"
    KNOWN = (
        "job.created",
        "job.paused",
        "job.resumed",
        "job.pause_extended",
        "job.pause_expired",
        "job.triggered",
        "job.deleted",
        "pause.requested",
        "pause.approved",
        "pause.refused",
        "run.started",
        "run.succeeded",
        "run.failed",
        "run.retrying",
        "run.dead",
        "run.lost",
        "run.requeued",
        "run.duplicate_delivery",
        "run.stale_write_rejected",
    )

    def lookups(self, request, model_admin):
        return [("job.*", "any job.* action"), ("run.*", "any run.* action"), *((a, a) for a in self.KNOWN)]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if value.endswith(".*"):
            return queryset.filter(action__startswith=value[:-1])
        return queryset.filter(action=value)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "action", "actor", "tenant", "job_link", "run_link", "short_detail")
    list_filter = (ActionFilter, "tenant")
    list_select_related = ("tenant", "job")
    raw_id_fields = ("tenant", "job")

    @admin.display(description="job")
    def job_link(self, event):
        """tenant/job: run events carry only the job's id, job events also its name (which
        outlives the job)."""
        if event.job is not None:
            url = reverse("admin:scheduler_app_job_change", args=[event.job_id])
            return format_html('<a href="{}">{}/{}</a>', url, event.tenant.slug, event.job.name)
        if event.job_name:
            return f"{event.tenant.slug}/{event.job_name} (deleted)"
        return "-"

    @admin.display(description="run")
    def run_link(self, event):
        if event.run_id is None:
            return "-"
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:scheduler_app_jobrun_change", args=[event.run_id]), event.run_id
        )

    @admin.display(description="detail")
    def short_detail(self, event):
        return shorten(json.dumps(event.detail, ensure_ascii=False), 80)


# django_celery_beat is installed so that manage.py import_beat can read its tables; its admin
