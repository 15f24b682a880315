"""Pauses in the admin (docs/pauses.md): the bulk pauses waiting for a second person,
approved or refused by actions calling services/pauses.py (approving takes the permission
approve_pauserequest, and is refused to the person who asked, or when the set of jobs
changed since), and the dashboard's panel of jobs paused by people: why, who, for how
long, until when and what then."""

from __future__ import annotations

from datetime import datetime

from django.contrib import admin, messages

from scheduler_app import alerts
from scheduler_app.admin.common import actor, when
from scheduler_app.models import Job, PauseRequest, PauseRequestState
from scheduler_app.services import pauses
from scheduler_app.validation import InvalidInput

PANEL_ROWS = 10


@admin.register(PauseRequest)
class PauseRequestAdmin(admin.ModelAdmin):
    list_display = ("id", "tenant", "scope", "job_count", "fingerprint", "requested_by", "requested_at", "state")
    list_filter = ("state",)
    list_select_related = ("tenant",)
    readonly_fields = [f.name for f in PauseRequest._meta.fields]
    actions = ("approve_requests", "refuse_requests")

    @admin.display(description="jobs")
    def job_count(self, request: PauseRequest) -> int:
        return len(request.job_ids)

    def has_add_permission(self, request) -> bool:
        return False  # made by a bulk pause over the threshold

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # kept: who asked and who approved

    def has_approve_permission(self, request) -> bool:
        return request.user.has_perms(["scheduler_app.approve_pauserequest", "scheduler_app.change_job"])

    def has_operate_permission(self, request) -> bool:
        return request.user.has_perm("scheduler_app.change_job")

    @admin.action(description="Approve selected pause requests (their jobs are paused)", permissions=["approve"])
    def approve_requests(self, request, queryset):
        for waiting in queryset.filter(state=PauseRequestState.PENDING):
            try:
                done = pauses.pause_request_approve(waiting, fingerprint=waiting.fingerprint, actor=actor(request))
            except InvalidInput as exc:
                self.message_user(request, f"Request {waiting.id} not approved: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"Approved request {waiting.id}: paused {done.count} job(s).")

    @admin.action(description="Refuse selected pause requests", permissions=["operate"])
    def refuse_requests(self, request, queryset):
        for waiting in queryset.filter(state=PauseRequestState.PENDING):
            pauses.pause_request_refuse(waiting, actor=actor(request))
        self.message_user(request, "Refused the waiting requests selected.")


def paused_panel(now: datetime, tenant_id: int | None) -> dict:
    """The jobs paused by people (not those that paused themselves), longest first, and
    the bulk pauses waiting for a second person."""
    jobs = Job.objects.filter(auto_paused_at__isnull=True).select_related("tenant")
    waiting = pauses.pending_requests()
    if tenant_id is not None:
        jobs, waiting = jobs.filter(tenant_id=tenant_id), waiting.filter(tenant_id=tenant_id)
    rows = [
        {
            "id": job.id,
            "job": f"{job.tenant.slug}/{job.name}",
            "by": job.paused_by or "?",
            "age": alerts.describe(now - job.paused_at) if job.paused_at else "?",
            "until": when(job.paused_until) if job.paused_until else "-",
            "then": job.pause_expiry or "-",
            "ran_out": job.paused_until is not None and job.paused_until <= now,
            "why": job.paused_note or "(no reason given)",
        }
        for job in pauses.paused_jobs(jobs)[:PANEL_ROWS]
    ]
    return {"rows": rows, "count": pauses.paused_jobs(jobs).count(), "waiting": waiting.count()}
