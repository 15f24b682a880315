"""The check-ins page (checkins/ under the prefix a project includes Cronfleet's URLs at,
cronfleet:checkins; /admin/checkins/ in Cronfleet's own deployment): every monitored job at a
glance, as healthchecks shows its checks: its status (ledger/checkstatus.py), its last ping
(relative and absolute) and the start of that ping's body, its grace, its schedule and its
ping URL. ?tenant=<slug> shows one tenant's, ?status=<status> one status. A staff page of the
default admin site, linked from the dashboard's link line; it shows jobs and what their runs
received, so it needs view_job and view_jobrun (a 403 page names what is missing).

One statement for a page of jobs (their latest check-in run and last ping are sub-selects,
ledger/checkstatus.py), and one count per status for the summary line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import admin
from django.core.paginator import Paginator
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from scheduler_app import services
from scheduler_app.admin.common import duration_text, when
from scheduler_app.ledger import checkstatus
from scheduler_app.management.tables import describe_schedule
from scheduler_app.models import Job, JobRun, Tenant, db_now
from scheduler_app.observability.errors import answers_server_errors

PER_PAGE = 100
BODY_SHOWN = 120  # characters of the last ping's body in the table (the run's page has it all)
PERMISSIONS = tuple(f"{Job._meta.app_label}.view_{model._meta.model_name}" for model in (Job, JobRun))
COLOURS = {"up": "succeeded", "late": "retrying", "down": "failed", "new": "pending", "paused": "skipped"}


def status_badge(status: str | None) -> str:
    """A check's status as a coloured label, in the run states' colours (console.css)."""
    if status is None:
        return "-"
    return format_html('<span class="cf-state cf-{} cf-check-{}">{}</span>', COLOURS[status], status, status)


@dataclass
class Check:
    job: Job
    status: str
    now: datetime

    @property
    def href(self) -> str:
        return reverse("admin:scheduler_app_job_change", args=[self.job.pk])

    @property
    def badge(self) -> str:
        return status_badge(self.status)

    @property
    def ping_ago(self) -> str:
        at = self.job.cf_ping_at  # type: ignore[attr-defined]
        return "never" if at is None else f"{duration_text(max(0.0, (self.now - at).total_seconds()))} ago"

    @property
    def ping_when(self) -> str:
        return when(self.job.cf_ping_at)  # type: ignore[attr-defined]

    @property
    def body(self) -> str:
        text = " ".join((self.job.cf_ping_body or "").split())  # type: ignore[attr-defined]
        return text if len(text) <= BODY_SHOWN else text[: BODY_SHOWN - 1] + "…"

    @property
    def grace(self) -> str:
        return duration_text(self.job.cf_grace)  # type: ignore[attr-defined]

    @property
    def schedule(self) -> str:
        job = self.job
        return describe_schedule(job.cron, job.timezone, job.every_seconds, job.run_at)

    @property
    def ping_url(self) -> str:
        monitor = getattr(self.job, "monitor", None)
        return services.ping_url(monitor) if monitor is not None else "-"


def checks_of(tenant_id: int | None):
    jobs = checkstatus.monitored(tenant_id).select_related("tenant", "monitor").order_by("tenant__slug", "name")
    return checkstatus.with_last_ping(checkstatus.with_check_fields(jobs))


@answers_server_errors
def checkins_view(request):
    """Every monitored job with its status and last ping; one tenant's with ?tenant=<slug>."""
    context = {**admin.site.each_context(request), "title": "Check-ins", "tenant": None, "error": ""}
    lacking = [name for name in PERMISSIONS if not request.user.has_perm(name)]
    if lacking:
        context["error"] = (
            f"The check-ins page shows jobs and their pings: it needs the permissions {', '.join(lacking)}."
        )
        return TemplateResponse(request, "admin/cronfleet_checkins.html", context, status=403)
    slug = request.GET.get("tenant", "").strip()
    if slug:
        context["tenant"] = Tenant.objects.filter(slug=slug).first()
        if context["tenant"] is None:
            context["error"] = f"tenant: there is no tenant {slug!r}"
            return TemplateResponse(request, "admin/cronfleet_checkins.html", context, status=404)
        context["title"] = f"Check-ins of tenant {slug}"
    wanted = request.GET.get("status", "").strip()
    if wanted and wanted not in checkstatus.STATUSES:
        context["error"] = f"status: must be one of {', '.join(checkstatus.STATUSES)}"
        return TemplateResponse(request, "admin/cronfleet_checkins.html", context, status=400)
    now = db_now()
    tenant_id = context["tenant"].pk if context["tenant"] else None
    counts = checkstatus.count_by_status(now, tenant_id)
    jobs = checks_of(tenant_id)
    if wanted:  # the status is computed in Python: a filtered page reads every monitored job once
        rows = [Check(job, status, now) for job in jobs if (status := checkstatus.status_of(job, now)) == wanted]
        page = Paginator(rows, PER_PAGE).get_page(request.GET.get("page"))
    else:
        page = Paginator(jobs, PER_PAGE).get_page(request.GET.get("page"))
        page.object_list = [Check(job, checkstatus.status_of(job, now) or "new", now) for job in page.object_list]
    context.update(
        now=when(now),
        counts=[(status, counts[status], status_badge(status)) for status in checkstatus.STATUSES],
        total=sum(counts.values()),
        wanted=wanted,
        page=page,
    )
    return TemplateResponse(request, "admin/cronfleet_checkins.html", context)
