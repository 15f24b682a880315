"""The run ledger: read-only, except replaying a failed or dead run (services.run_replay).

The ledger holds millions of rows, so its list
- counts at most LEDGER_COUNT_CAP + 1 of the filtered rows (CappedPaginator; the page says
  "more than 10,000") and never the whole table;
- is ordered newest first by the index that serves the filter in use: the primary key when
  unfiltered, (job, scheduled_at), (tenant, -scheduled_at), (state, -scheduled_at) or the
  partial jobrun_triggered_idx otherwise (ordered_by_fire); its columns do not sort (only
  the id does, both ways on the primary key): ordering ten million runs by fire time, job
  or finish time read and sorted the whole table (19-24 s);
- counts a tenant's runs in one state from jobrun_tenant_state_idx alone;
- filters by fire date (today, past 7 days, this month, this year: all end tomorrow, so the
  newest ids come first on the primary key);
- searches by exact keys, never with LIKE over the table: a fire key (job12@20240101T...Z),
  a run id, tenant/job, or a job name looked up in the job table first (search_runs).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from scheduler_app import services
from scheduler_app.admin import chains
from scheduler_app.admin.common import ReadOnlyAdmin, actor, duration_text, state_badge, when
from scheduler_app.ledger.lags import dispatch_lag, run_start_lag
from scheduler_app.management.tables import shorten
from scheduler_app.models import AuditEvent, Job, JobRun, TargetKind
from scheduler_app.observability.errors import answers_server_errors

LEDGER_COUNT_CAP = 10_000
SEARCH_JOB_LIMIT = 50  # jobs a name search may match; more: type more of the name
RUN_EVENTS = 50
FIRE_KEY = re.compile(r"job(\d+)@(\d{8}T\d{6}(?:\.\d{1,6})?)Z")
# Filters whose column leads an index with scheduled_at next: ordered by fire time, newest first.
FIRE_ORDERED_FILTERS = ("job__id__exact", "tenant__id__exact", "state__exact", "trigger__exact")


class CappedPaginator(Paginator):
    """Counts at most LEDGER_COUNT_CAP + 1 rows: SELECT count(*) FROM (... LIMIT 10001).

    A page is read in two steps: the ids of its rows (OFFSET over the ledger's index alone),
    then those rows with their jobs and tenants. In one statement PostgreSQL joined each
    skipped row's job before the OFFSET dropped it: page 100 of an unfiltered ledger of
    10,000,000 runs took 127 ms, 113 of them in 10,000 job lookups."""

    @cached_property
    def count(self) -> int:
        return self.object_list.order_by()[: LEDGER_COUNT_CAP + 1].count()

    def page(self, number):
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        ids = list(self.object_list.values_list("pk", flat=True)[bottom : bottom + self.per_page])
        return self._get_page(list(self.object_list.filter(pk__in=ids)), number, self)

    @property
    def capped(self) -> bool:
        return self.count > LEDGER_COUNT_CAP


class FireDateFilter(admin.DateFieldListFilter):
    """Django's date filter on scheduled_at, titled as the list's column is."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.title = "fire time"


def parse_instant(value) -> datetime | None:
    """An instant from a run's `attempts` record (ISO text; SQLite's has no offset: UTC)."""
    if not value:
        return None
    found = datetime.fromisoformat(value) if isinstance(value, str) else value
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def attempt_history(run: JobRun) -> list[dict]:
    """Every attempt of `run`, oldest first: the finished ones from `attempts`, then the
    current one from the row itself unless its record is already there."""
    history = [
        {
            "attempt": record.get("attempt"),
            "worker": record.get("worker") or "",
            "started_at": parse_instant(record.get("started_at")),
            "finished_at": parse_instant(record.get("finished_at")),
            "outcome": record.get("outcome") or "",
            "error": record.get("error") or "",
        }
        for record in run.attempts or []
    ]
    if not history or history[-1]["attempt"] != run.attempt:
        history.append(
            {
                "attempt": run.attempt,
                "worker": run.worker,
                "started_at": run.started_at,
                "finished_at": run.finished_at if run.state not in ("queued", "running") else None,
                "outcome": run.state,
                "error": run.error,
                "current": True,
            }
        )
    for record in history:
        start, end = record["started_at"], record["finished_at"]
        record["took"] = (end - start).total_seconds() if start and end else None
    return history


def search_runs(queryset, term: str):
    """Runs matching `term` by an index, and whether the result may hold duplicates."""
    term = term.strip()
    if match := FIRE_KEY.fullmatch(term):
        at = datetime.strptime(match.group(2).split(".")[0], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
        micro = match.group(2).partition(".")[2]
        at = at.replace(microsecond=int(micro.ljust(6, "0")) if micro else 0)
        return queryset.filter(job_id=int(match.group(1)), scheduled_at=at)
    if term.isdigit():
        return queryset.filter(id=int(term))
    slug, slash, name = term.partition("/")
    jobs = Job.objects.filter(tenant__slug=slug, name=name) if slash else Job.objects.filter(name__icontains=term)
    ids = list(jobs.order_by("id").values_list("id", flat=True)[:SEARCH_JOB_LIMIT])
    return queryset.filter(job_id__in=ids)


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job_link",
        "fire_time",
        "trigger_text",
        "state_label",
        "attempt_no",
        "started",
        "finished",
        "took",
        "short_reason",
    )
    list_display_links = ("id",)
    list_filter = ("state", "trigger", "tenant", ("scheduled_at", FireDateFilter))
    list_select_related = ("job__tenant",)
    raw_id_fields = ("job", "tenant")
    search_fields = ("job__name",)  # shows the box; search_runs decides what a term matches
    search_help_text = "A job (tenant/job, or part of its name), a fire key (job12@20240101T090000.000000Z) or a run id"
    paginator = CappedPaginator
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "job_link",
                    "tenant",
                    "scheduled_at",
                    "fire_key",
                    "trigger",
                    "state_label",
                    "attempt",
                    "reason",
                    "job_version",
                    "priority",
                    "duplicate_deliveries",
                    "parent_run_link",
                    "child_runs_links",
                )
            },
        ),
        (
            "Times",
            {
                "fields": (
                    "created_at",
                    "first_dispatched",
                    "last_queued",
                    "started_at",
                    "heartbeat_at",
                    "finished_at",
                    "next_attempt_at",
                    "lease_expires_at",
                    "lags",
                )
            },
        ),
        ("Attempts", {"fields": ("attempt_table",)}),
        ("Outcome", {"fields": ("worker", "celery_task_id", "error_text", "result_text")}),
        ("Audit trail", {"fields": ("events",)}),
    )
    readonly_fields = (
        "job_link",
        "fire_key",
        "state_label",
        "first_dispatched",
        "last_queued",
        "lags",
        "attempt_table",
        "error_text",
        "result_text",
        "events",
        "parent_run_link",
        "child_runs_links",
    )

    class Media:
        css = {"all": ("scheduler_app/console.css",)}

    def get_ordering(self, request):
        return ("-scheduled_at",) if ordered_by_fire(request) else ("-id",)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("job__tenant")  # the page's title names the job

    def get_search_results(self, request, queryset, search_term):
        if not search_term.strip():
            return queryset, False
        return search_runs(queryset, search_term), False

    # -- the list --

    @admin.display(description="job")
    def job_link(self, run):
        url = reverse("admin:scheduler_app_job_change", args=[run.job_id])
        return format_html('<a href="{}">{}</a>', url, run.job)

    @admin.display(description="parent run")
    def parent_run_link(self, run):
        return chains.parent_run_html(run)  # chains: the run whose end started this one

    @admin.display(description="runs it started")
    def child_runs_links(self, run):
        return chains.child_runs_html(run)

    @admin.display(description="fire time")
    def fire_time(self, run):
        return when(run.scheduled_at)

    @admin.display(description="trigger")
    def trigger_text(self, run):
        return run.get_trigger_display()

    @admin.display(description="#")
    def attempt_no(self, run):
        return run.attempt

    @admin.display(description="state")
    def state_label(self, run):
        return state_badge(run.state)

    @admin.display(description="started")
    def started(self, run):
        return short_time(run.started_at, run.scheduled_at)

    @admin.display(description="finished")
    def finished(self, run):
        return short_time(run.finished_at, run.scheduled_at)

    @admin.display(description="took")
    def took(self, run):
        if run.started_at and run.finished_at:
            return duration_text(run.finished_at - run.started_at)
        return "-"

    @admin.display(description="reason / error")
    def short_reason(self, run):
        text = run.error or run.reason
        if not text:
            return "-"
        # Cut here and by CSS (the column's width); the whole text is on the run's page.
        return format_html('<span class="cf-cut" title="{}">{}</span>', shorten(text, 500), shorten(text, 90))

    # -- the run's page --

    @admin.display(description="fire key")
    def fire_key(self, run):
        return run.fire_key

    # dispatched_at is the first trip to the broker, enqueued_at the latest (a retry or a
    # replay moves it): named so, in that order, the later time reads as the later event.
    @admin.display(description="first dispatched at")
    def first_dispatched(self, run):
        return when(run.dispatched_at)

    @admin.display(description="last queued at")
    def last_queued(self, run):
        return when(run.enqueued_at)

    @admin.display(description="lags")
    def lags(self, run):
        parts = []
        if run.dispatched_at or run.enqueued_at:
            parts.append(
                f"dispatch {duration_text(dispatch_lag(run.scheduled_at, run.dispatched_at or run.enqueued_at))}"
            )
        if run.started_at:
            parts.append(f"start {duration_text(run_start_lag(run))}")
        if run.started_at and run.finished_at:
            parts.append(f"took {duration_text(run.finished_at - run.started_at)}")
        return " · ".join(parts) or "-"

    @admin.display(description="attempts")
    def attempt_table(self, run):
        rows = format_html_join(
            "",
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class='cf-error'>{}</td></tr>",
            (
                (
                    " class='cf-current'" if record.get("current") else "",
                    record["attempt"],
                    when(record["started_at"]),
                    when(record["finished_at"]),
                    duration_text(record["took"]),
                    record["worker"] or "-",
                    state_badge(record["outcome"]),
                    record["error"] or "-",
                )
                for record in attempt_history(run)
            ),
        )
        return format_html(
            "<table class='cf-attempts'><thead><tr><th>#</th><th>started</th><th>finished</th><th>took</th>"
            "<th>worker</th><th>outcome</th><th>error</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="error")
    def error_text(self, run):
        return format_html("<pre class='cf-pre'>{}</pre>", run.error) if run.error else "-"

    @admin.display(description="result")
    def result_text(self, run):
        return format_html("<pre class='cf-pre'>{}</pre>", run.result) if run.result else "-"

    @admin.display(description="events")
    def events(self, run):
        found = AuditEvent.objects.filter(tenant_id=run.tenant_id, run_id=run.pk).order_by("id")[:RUN_EVENTS]
        if not found:
            return "none (normal transitions are in the attempts above)"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (when(event.created_at), event.action, event.actor or "-", shorten(str(event.detail), 200))
                for event in found
            ),
        )
        return format_html("<table class='cf-attempts'><tbody>{}</tbody></table>", rows)

    # -- replay --

    def get_urls(self):
        return [
            path(
                "<path:object_id>/replay/",
                self.admin_site.admin_view(answers_server_errors(self.replay_view)),
                name="scheduler_app_jobrun_replay",
            ),
            *super().get_urls(),
        ]

    def has_operate_permission(self, request) -> bool:
        return request.user.has_perm("scheduler_app.change_job")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, object_id)
        extra = {
            "can_replay": run is not None
            and run.state in services.REPLAYABLE
            and run.job.target_kind != TargetKind.MONITOR  # it runs elsewhere: services refuse a replay
            and self.has_operate_permission(request),
            "subtitle": f"Run {run.pk} of {run.job} at {when(run.scheduled_at)}" if run else None,
            # The breadcrumb after the job's tenant/job link (str(run) says "job 12").
            "cf_run_label": f"run {run.pk} at {when(run.scheduled_at)}" if run else "",
        }
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    def replay_view(self, request, object_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        run = get_object_or_404(JobRun, pk=object_id)
        try:
            run = services.run_replay(run, actor=actor(request))
        except services.InvalidInput as exc:
            self.message_user(request, f"Not replayed: {exc.field}: {exc.message}", messages.ERROR)
        else:
            self.message_user(request, f"Run {run.pk} is queued again as attempt {run.attempt}.")
        return HttpResponseRedirect(reverse("admin:scheduler_app_jobrun_change", args=[run.pk]))


def ordered_by_fire(request) -> bool:
    """Whether the list is filtered (or searched) by a column that leads an index with
    scheduled_at: then newest fire first is a walk down that index."""
    return any(request.GET.get(name) for name in (*FIRE_ORDERED_FILTERS, "q")) and not request.GET.get("o")


def short_time(value: datetime | None, scheduled_at: datetime) -> str:
    """A run's start or end in the list: the time of day to the second when the fire time's
    column on the same row gives its date and zone (the whole instant in the tooltip), or the
    whole instant otherwise. Both zones named made the row too wide for 1,280 px."""
    if value is None:
        return "-"
    full, fired = when(value), when(scheduled_at)
    # "2024-01-01 18:33:05 UTC": the same date and the same zone as the fire time
    same = fired[:10] == full[:10] and fired[19:] == full[19:]
    return format_html('<span title="{}">{}</span>', full, full[11:19] if same else full)
