"""The job page's console: recent runs, the last 24 hours of fires and the operator's
actions (pause/resume, trigger now, backfill with a dry run,
replay the last failed run). The next fires, with DST flags, are the form's next_fires
field. Every read goes down the (job, scheduled_at) unique index;
every write is a service call. The console shows runs, an alert rule and alerts' texts: only
to staff who may view all three (CONSOLE_PERMISSIONS); the others see the job's form alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduler_app import services, validation
from scheduler_app.admin import alerts as alerts_admin
from scheduler_app.admin import chains, charts, checkins
from scheduler_app.admin.common import actor, duration_text, when
from scheduler_app.ledger import checkstatus
from scheduler_app.ledger.lags import run_start_lag
from scheduler_app.management.tables import shorten
from scheduler_app.models import Alert, AlertRule, Job, JobRun, TargetKind, db_now

RECENT_RUNS = 20
TIMELINE = timedelta(hours=24)
TIMELINE_MIN = timedelta(minutes=10)  # the shortest axis of a young job's timeline
TIMELINE_LIMIT = 3000  # fires drawn; a job firing every few seconds shows its latest this many
CONSOLE_PERMISSIONS = tuple(
    f"{Job._meta.app_label}.view_{model._meta.model_name}" for model in (JobRun, AlertRule, Alert)
)


def may_see_console(user) -> bool:
    return user.has_perms(CONSOLE_PERMISSIONS)


@dataclass
class RecentRun:
    run: JobRun
    start_lag: float | None
    took: float | None

    @property
    def href(self) -> str:
        return reverse("admin:scheduler_app_jobrun_change", args=[self.run.pk])

    @property
    def fire_time(self) -> str:
        return when(self.run.scheduled_at)

    @property
    def start_lag_text(self) -> str:
        return duration_text(self.start_lag)

    @property
    def took_text(self) -> str:
        return duration_text(self.took)

    @property
    def error_text(self) -> str:
        return shorten(self.run.error or self.run.reason, 80)


def recent_runs(job: Job) -> list[RecentRun]:
    runs = (
        JobRun.objects.filter(job=job)
        .order_by("-scheduled_at")
        .only(
            "id",
            "job_id",
            "scheduled_at",
            "trigger",
            "state",
            "attempt",
            "enqueued_at",
            "started_at",
            "finished_at",
            "error",
            "reason",
            "worker",
        )[:RECENT_RUNS]
    )
    return [
        RecentRun(
            run,
            run_start_lag(run),
            (run.finished_at - run.started_at).total_seconds() if run.started_at and run.finished_at else None,
        )
        for run in runs
    ]


def fire_timeline(job: Job, now: datetime):
    since = now - TIMELINE
    rows = list(
        JobRun.objects.filter(job=job, scheduled_at__gt=since, scheduled_at__lte=now)
        .order_by("-scheduled_at")
        .values_list("id", "scheduled_at", "state")[:TIMELINE_LIMIT]
    )
    marks = [
        charts.Mark(at, state, f"{when(at)} {state}", reverse("admin:scheduler_app_jobrun_change", args=[pk]))
        for pk, at, state in rows
    ]
    shown = f"{len(rows)}{'+' if len(rows) == TIMELINE_LIMIT else ''}"
    if job.created_at and job.created_at > since:
        # A job younger than the window: its lifetime is the axis (a day would squash its fires
        # into one bar), from its creation or its oldest fire (a backfill), at least TIMELINE_MIN.
        start = min([job.created_at, now - TIMELINE_MIN, *(at for _, at, _ in rows)])
        title = f"Fires since the job was created {duration_text((now - job.created_at).total_seconds())} ago ({shown})"
        return charts.timeline(title, timezone.localtime(start), timezone.localtime(now), marks)
    title = f"Fires in the last 24 hours ({shown})"
    return charts.timeline(title, timezone.localtime(since), timezone.localtime(now), marks)


def last_failed_run(job: Job) -> JobRun | None:
    """The newest failed or dead run of the job among its last RECENT_RUNS * 5 fires."""
    recent = JobRun.objects.filter(job=job).order_by("-scheduled_at").values("id")[: RECENT_RUNS * 5]
    return (
        JobRun.objects.filter(id__in=recent, state__in=services.REPLAYABLE)
        .order_by("-scheduled_at")
        .only("id", "attempt", "state", "scheduled_at")
        .first()
    )


def console_context(job: Job, *, can_operate: bool) -> dict:
    now = db_now()
    return {
        **alerts_admin.panel_context(job, now),
        **chains.chain_context(job),
        "cf_job": job,
        "cf_recent": recent_runs(job),
        "cf_timeline": fire_timeline(job, now),
        "cf_last_failed": last_failed_run(job),
        "cf_can_operate": can_operate,
        # A monitored job runs elsewhere: no trigger, replay or backfill (services refuse them).
        "cf_monitored": job.target_kind == TargetKind.MONITOR,
        "cf_checkin": checkin_badge(job, now),
        "cf_now": when(now),
        "cf_backfill_start": timezone.localtime(now - timedelta(hours=3)).strftime("%Y-%m-%d %H:%M:%S"),
        "cf_backfill_end": timezone.localtime(now).strftime("%Y-%m-%d %H:%M:%S"),
    }


def checkin_badge(job: Job, now: datetime) -> str:
    """A monitored job's check-in status as a badge ('' for other jobs)."""
    if job.target_kind != TargetKind.MONITOR:
        return ""
    read = checkstatus.with_check_fields(Job.objects.filter(pk=job.pk)).only("id", "enabled", "target_kind").first()
    return checkins.status_badge(checkstatus.status_of(read, now)) if read is not None else ""


# --- the actions: each a POST to <job id>/console/<action>/ ----------------------------


def operate(model_admin, request, object_id: str, action: str):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    job = get_object_or_404(Job.objects.select_related("tenant"), pk=object_id)
    handler = ACTIONS.get(action)
    if handler is None:
        raise PermissionDenied
    try:
        text, level = handler(job, request)
    except services.InvalidInput as exc:
        text, level = f"{action}: {exc.field}: {exc.message}", messages.ERROR
    model_admin.message_user(request, text, level)
    return HttpResponseRedirect(reverse("admin:scheduler_app_job_change", args=[job.pk]))


PAUSE_HOURS = ("1", "4", "24", "168")  # the job page's "for how long" choices


def do_pause(job: Job, request):
    note = request.POST.get("note") or f"paused in the admin by {request.user}"
    hours = request.POST.get("for") or ""
    if hours and hours not in PAUSE_HOURS:
        raise services.InvalidInput("for", f"must be one of {', '.join(PAUSE_HOURS)} hours")
    until = db_now() + timedelta(hours=int(hours)) if hours else None
    on_expiry = (request.POST.get("on_expiry") or "") if until else ""
    job = services.job_pause(job, note=note, actor=actor(request), until=until, on_expiry=on_expiry)
    end = f" until {when(job.paused_until)}, then {job.pause_expiry}" if job.paused_until else ""
    return f"Paused {job}{end}.", messages.SUCCESS


def do_resume(job: Job, request):
    services.job_resume(job, actor=actor(request))
    return f"Resumed {job}.", messages.SUCCESS


def do_trigger(job: Job, request):
    run, error = services.job_trigger_reporting(job, actor=actor(request))
    if error is not None:
        return (f"Run {run.pk} is recorded but was not sent to the broker: {shorten(str(error), 200)}", messages.ERROR)
    return f"Triggered {job}: run {run.pk}.", messages.SUCCESS


def instant(request, name: str) -> datetime:
    """A backfill bound typed in the site's zone (or with an offset)."""
    text = (request.POST.get(name) or "").strip()
    validation.check_instant_text(name, text)
    value = parse_datetime(text.replace("T", " ")) if text else None
    if value is None:
        raise services.InvalidInput(name, "give a date and time, e.g. 2024-01-01 09:00:00")
    return value if timezone.is_aware(value) else timezone.make_aware(value)


def do_backfill(job: Job, request):
    dry_run = request.POST.get("dry_run") == "1"
    found = services.job_backfill(
        job, start=instant(request, "start"), end=instant(request, "end"), dry_run=dry_run, actor=actor(request)
    )
    missing = found["missing"]
    listed = ", ".join(when(at) for at in missing[:10]) + (" ..." if len(missing) > 10 else "")
    if dry_run:
        return (
            f"Dry run: {len(found['fires'])} fire(s) in the range, {found['existing']} already recorded, "
            f"{len(missing)} would be backfilled{': ' + listed if missing else ''}.",
            messages.INFO,
        )
    return (
        f"Backfilled {found['created']} run(s) ({found['held']} held for the tenant's quota); "
        f"{found['existing']} fire(s) were already recorded.",
        messages.SUCCESS,
    )


def do_replay_last_failed(job: Job, request):
    run = last_failed_run(job)
    if run is None:
        return "No failed or dead run among the job's recent runs.", messages.WARNING
    run = services.run_replay(run, actor=actor(request))
    return f"Run {run.pk} ({when(run.scheduled_at)}) is queued again as attempt {run.attempt}.", messages.SUCCESS


ACTIONS = {
    "pause": do_pause,
    "resume": do_resume,
    "trigger": do_trigger,
    "backfill": do_backfill,
    "replay": do_replay_last_failed,
}
