"""What the commands say of a job and how they find one: `jobs`' text for its schedule, status,
target and runs, and the lookup by id or TENANT/NAME that `alerts` and `retention` share."""

from __future__ import annotations

import json

from django.db.models import OuterRef, Subquery

from scheduler_app import services
from scheduler_app.management.tables import cell, describe_schedule, format_table, shorten
from scheduler_app.models import Job, JobRun
from scheduler_app.services.chains import after_text
from scheduler_app.targets import sql as sqljobs

JOB_HELP = "a job id, or TENANT/NAME"
RUN_FIELDS = ("id", "scheduled_at", "trigger", "state", "attempt", "reason", "error", "started_at", "finished_at")


def cron_time(cron: str) -> str:
    """The local time a placed expression fires at: '01:37' (daily), ':37' (hourly)."""
    minute, hour = cron.split()[:2]
    return f":{int(minute):02d}" if hour == "*" else f"{int(hour):02d}:{int(minute):02d}"


def check_range(field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise services.InvalidInput(field, f"must be between {low} and {high}")
    return value


def find_job(ref: str) -> Job:
    """The job named by `ref`: its id, or TENANT/NAME (the name may contain '/')."""
    ref = ref.strip()
    jobs = Job.objects.select_related("tenant")
    if ref.isascii() and ref.isdigit() and len(ref) <= 18:
        job = jobs.filter(id=int(ref)).first()
    elif "/" in ref:
        slug, _, name = ref.partition("/")
        job = jobs.filter(tenant__slug=slug, name=name).first()
    else:
        raise services.InvalidInput("job", f"{ref!r} is neither a job id nor TENANT/NAME")
    if job is None:
        raise services.InvalidInput("job", f"no job {ref!r}")
    return job


def change_text(value) -> str:
    """One side of a changed field: JSON for lists and objects, '-' for nothing."""
    return shorten(json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else cell(value), 80)


def job_label(job: Job) -> str:
    return f"{job.id} ({job.tenant.slug}/{job.name})"


def schedule_text(job: Job) -> str:
    if job.after_job_id is not None:  # chains: no schedule of its own (one query, for chained jobs only)
        return after_text(job.after_job.name, job.after_states)
    if job.flex_window:
        return f"window {job.flex_window} ({job.timezone}), placed at cron {job.cron}"
    return describe_schedule(job.cron, job.timezone, job.every_seconds, job.run_at)


def no_fires_text(job: Job) -> str:
    """In place of a fires table that is empty: a chained job runs after its parent instead."""
    if job.after_job_id is not None:
        return f"(none of its own: it runs {schedule_text(job)})"
    return "(no fires left)"


def status_text(job: Job) -> str:
    """enabled, paused (by a person), or paused (auto): paused itself after repeated failure."""
    if job.enabled:
        return "enabled"
    return "paused (auto)" if job.auto_paused_at is not None else "paused"


def last_run_state() -> Subquery:
    """The state of a job's latest run (by fire time), for annotating a page of jobs.

    Each row costs one probe of the (job, scheduled_at) unique index, never a join over runs.
    """
    latest = JobRun.objects.filter(job=OuterRef("pk")).order_by("-scheduled_at").values("state")[:1]
    return Subquery(latest)


def recent_runs(job: Job, *, limit: int, state: str = "") -> list[JobRun]:
    runs = JobRun.objects.filter(job=job).order_by("-scheduled_at").only(*RUN_FIELDS)
    if state:
        runs = runs.filter(state=state)
    return list(runs[:limit])


def runs_table(runs: list[JobRun]) -> str:
    if not runs:
        return "(no runs)"
    rows = [
        (
            run.id,
            run.scheduled_at,
            run.trigger,
            run.state,
            run.attempt,
            shorten(run.reason or run.error, 60),
            run.started_at,
            run.finished_at,
        )
        for run in runs
    ]
    return format_table(
        ["id", "scheduled_at", "trigger", "state", "attempt", "reason/error", "started", "finished"], rows
    )


def target_text(job: Job) -> str:
    if job.target_kind == "http":
        return f"http {job.target_config.get('method')} {job.target_config.get('url')}"
    if job.target_kind == "command":
        return f"command {job.target_config.get('name')} {job.target_config.get('params')}"
    if job.target_kind == "sql":
        return sqljobs.describe(job.target_config)
    if job.target_kind == "monitor":
        monitor = getattr(job, "monitor", None)
        url = services.ping_url(monitor) if monitor is not None else "(no ping key)"
        return f"monitor (grace {job.target_config.get('grace_seconds')} s), check-in URL {url}"
    return f"task {job.task_name}"
