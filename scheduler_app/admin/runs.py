"""The run ledger: read-only."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from scheduler_app.admin.common import ReadOnlyAdmin
from scheduler_app.management.tables import shorten
from scheduler_app.models import JobRun

@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_link", "tenant", "scheduled_at", "trigger", "state", "attempt", "short_reason",
                    "started_at", "finished_at")
    list_filter = ("state", "trigger", "tenant")
    list_select_related = ("job", "tenant")
    raw_id_fields = ("job", "tenant")
    # Newest first by primary key: the unfiltered ledger of millions of rows pages from the
    # primary key index. (No date hierarchy: its distinct-years query scans the table.)
    ordering = ("-id",)

    @admin.display(description="job", ordering="job__name")
    def job_link(self, run):
        url = reverse("admin:scheduler_app_job_change", args=[run.job_id])
        return format_html('<a href="{}">{}/{}</a>', url, run.tenant.slug, run.job.name)

    @admin.display(description="reason / error")
    def short_reason(self, run):
        return shorten(run.reason or run.error, 80) or "-"

