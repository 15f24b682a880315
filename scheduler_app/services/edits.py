"""Editing a job: the edit planned and validated as a whole, its impact previewed, schedules
previewed."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import IntegrityError, transaction

from scheduler_app import schedules
from scheduler_app.conf import app_settings
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import JOB_NAME_UNIQUE, Job, TargetKind, db_now
from scheduler_app.models.lifecycle import audit_job
from scheduler_app.services import chains, flexible
from scheduler_app.services.checkins import ensure_monitor
from scheduler_app.services.common import check_int, jsonable, violates
from scheduler_app.services.jobs import first_fire
from scheduler_app.services.jobspec import JobSpec, validate_spec
from scheduler_app.targets import task as task_target
from scheduler_app.validation import InvalidInput

logger = logging.getLogger(__name__)


def job_preview(job_or_schedule, *, count: int, after: datetime | None = None) -> list[datetime]:
    schedule = job_or_schedule.schedule if isinstance(job_or_schedule, Job) else job_or_schedule
    return schedules.preview(schedule, after or db_now(), count)


SCHEDULE_FIELDS = ("cron", "every", "at", "flex_window")


SPEC_FIELDS = frozenset(JobSpec.__dataclass_fields__)
# What an edit that chains a job clears when not given (a chained job has no schedule).
CHAINED_BLANKS = (
    ("cron", ""),
    ("every", None),
    ("at", None),
    ("start_at", None),
    ("end_at", None),
    ("jitter_seconds", 0),
    ("calendar", ""),
    ("flex_window", ""),
)


def job_spec_of(job: Job) -> JobSpec:
    """The JobSpec that describes `job` as it is saved (the base an edit is merged onto)."""
    return JobSpec(
        name=job.name,
        task_name=job.task_name,
        target_kind=job.target_kind,
        http=dict(job.target_config) if job.target_kind == TargetKind.HTTP else None,
        command=dict(job.target_config) if job.target_kind == TargetKind.COMMAND else None,
        sql=dict(job.target_config) if job.target_kind == TargetKind.SQL else None,
        monitor=dict(job.target_config) if job.target_kind == TargetKind.MONITOR else None,
        # A flexible job is stated by its window; its placed cron is kept by plan_edit.
        cron="" if job.flex_window else job.cron,
        timezone=job.timezone,
        every=job.every_seconds,
        at=job.run_at,
        start_at=job.start_at,
        end_at=job.end_at,
        args=job.args,
        kwargs=job.kwargs,
        queue=job.queue,
        priority=job.priority,
        timeout_seconds=job.timeout_seconds,
        max_attempts=job.max_attempts,
        retry_backoff_seconds=job.retry_backoff_seconds,
        retry_backoff_max_seconds=job.retry_backoff_max_seconds,
        misfire_policy=job.misfire_policy,
        catchup_window_seconds=job.catchup_window_seconds,
        run_all_cap=job.run_all_cap,
        overlap_policy=job.overlap_policy,
        description=job.description,
        tags=list(job.tags),
        jitter_seconds=job.jitter_seconds,
        batch=job.batch,
        pause_after_failures=job.pause_after_failures,
        calendar=job.calendar.name if job.calendar_id else "",
        calendar_policy=job.calendar_policy,
        after_job=job.after_job.name if job.after_job_id else "",
        after_states=list(job.after_states or []) or None,
        flex_window=job.flex_window,
        flex_scope=job.flex_scope,
    )


@dataclass
class Edit:
    """A validated edit of a job: its new columns and what it does to the schedule."""

    fields: dict
    schedule: schedules.Schedule
    schedule_changed: bool
    diff: dict


def plan_edit(job: Job, changes: dict, now: datetime, *, allow_any_registered: bool = False) -> Edit:
    """Merge `changes` (JobSpec field names) onto the job and validate the whole.

    Giving any of cron/every/at replaces the schedule: the kinds not given are cleared. A task
    staff chose in the admin beyond the allow-list stays allowed while the edit keeps it;
    allow_any_registered=True (the admin's change form, for staff) accepts any registered task.
    """
    unknown = sorted(set(changes) - SPEC_FIELDS)
    if unknown:
        raise InvalidInput(unknown[0], "is not a job field")
    changes = dict(changes)
    if any(key in changes for key in SCHEDULE_FIELDS):
        changes.setdefault("cron", "")
        changes.setdefault("every", None)
        changes.setdefault("at", None)
        changes.setdefault("flex_window", "")
    if "after_job" in changes:  # chaining drops the job's own schedule; unchaining its after_states
        chained = changes["after_job"] not in (None, "")
        for key, blank in CHAINED_BLANKS if chained else (("after_states", None),):
            changes.setdefault(key, blank)
    before = job_spec_of(job)
    spec = replace(before, **changes)
    if not spec.flex_window and "flex_scope" not in changes:  # the window's scope goes with it
        spec = replace(spec, flex_scope="")
    schedule_keys = (
        *SCHEDULE_FIELDS,
        "timezone",
        "start_at",
        "end_at",
        "jitter_seconds",
        "calendar",
        "calendar_policy",
        "after_job",
        "flex_scope",
    )
    schedule_changed = any(getattr(spec, key) != getattr(before, key) for key in schedule_keys)
    # An interval keeps its anchor unless the interval itself changes.
    anchor = job.anchor_at if spec.every is not None and spec.every == job.every_seconds else None
    schedule, fields = validate_spec(
        job.tenant,
        spec,
        now,
        anchor=anchor,
        jitter_seed=job.jitter_seed,
        check_schedule_quota=schedule_changed,
        check_end=spec.end_at != before.end_at,
        flex_kept=flexible.kept_placement(job, spec),
        job_id=job.id,
        allow_any_registered=allow_any_registered,
        kept_task=job.task_name if task_target.chosen_in_admin(job) else "",
        kept_queue=job.queue,
    )
    if fields["after_job_id"] != job.after_job_id:
        chains.check_no_loop(job, Job.objects.filter(id=fields["after_job_id"]).first())
    diff = {
        key: [jsonable(getattr(job, key)), jsonable(value)]
        for key, value in fields.items()
        if getattr(job, key) != value
    }
    return Edit(fields=fields, schedule=schedule, schedule_changed=schedule_changed, diff=diff)


def job_update(job: Job, changes: dict, *, actor: str = "", allow_any_registered: bool = False) -> Job:
    """Apply `changes` to a job (validated as a whole), bump its version and, when the
    schedule changed, compute its next fire from now. Runs already recorded are left alone.
    allow_any_registered=True comes from the admin's change form only (plan_edit)."""
    with transaction.atomic():
        if changes.get("flex_window") or job.flex_window:  # a placement: under its scope's lock
            flexible.lock_placements([job.tenant_id], placement_queues(job, changes))
        return _update(job, changes, actor, allow_any_registered)


def placement_queues(job: Job, changes: dict) -> list[str]:
    """The queues whose placements an edit of `job` may read: its queue before and after, when
    the job is (or becomes) placed against its queue's load."""
    queue_scoped = "queue" in (job.flex_scope, changes.get("flex_scope"))
    return [job.queue, changes.get("queue", job.queue) or ""] if queue_scoped else []


def _update(job: Job, changes: dict, actor: str, allow_any_registered: bool) -> Job:
    now = db_now()
    edit = plan_edit(job, changes, now, allow_any_registered=allow_any_registered)
    if not edit.diff:
        return job
    check_managed(job, actor)
    fields = dict(edit.fields)
    if edit.schedule_changed:
        fields["next_run_at"] = first_fire(edit.schedule, now)
    if "pause_after_failures" in edit.diff:  # a new threshold counts from now (ledger.autopause)
        fields["consecutive_failures"] = 0
    try:
        with transaction.atomic():
            locked = Job.objects.select_for_update().get(id=job.id)
            if "after_job_id" in edit.diff:  # again under the tenant's lock: no two edits close a loop
                chains.lock_chains(job.tenant_id)
                chains.check_no_loop(job, Job.objects.filter(id=fields["after_job_id"]).first())
            Job.objects.filter(id=job.id).update(version=locked.version + 1, updated_at=now, **fields)
            if "after_job_id" in edit.diff:
                chains.refresh_has_children([locked.after_job_id, fields["after_job_id"]])
            audit_job(job, "job.updated", actor, changes=edit.diff)
            if fields.get("target_kind") == TargetKind.MONITOR:
                locked.target_kind = TargetKind.MONITOR  # as just written: `locked` was read before
                ensure_monitor(locked)  # a job made monitored gets its ping key
            wake_beats()
    except IntegrityError as exc:
        if not violates(exc, Job, JOB_NAME_UNIQUE):
            raise
        raise InvalidInput("name", f"tenant {job.tenant.slug!r} already has a job named {fields['name']!r}") from None
    job.refresh_from_db()
    return job


def managed_actor(owner: str) -> str:
    """The audit actor of `schedules apply` for `owner`: the one editor of its jobs that is
    not an edit outside the declaration (services/declared.py)."""
    return f"schedules:{owner}"


def managed_notice(job: Job) -> str:
    """What a person editing a job managed by schedules as code is told ('' for other jobs)."""
    if not job.managed_by:
        return ""
    return (
        f"job {job.tenant.slug}/{job.name} is managed by schedules as code (owner {job.managed_by!r}): "
        "change its declaration and run `manage.py schedules apply`"
    )


def check_managed(job: Job, actor: str) -> str:
    """Refuse an edit of a managed job from anyone but its apply under
    CRONFLEET_MANAGED_JOBS_READ_ONLY; else return drift_warning() (the edit shows as drift in
    the next plan, and the next apply sets the job back), which the API, the admin and the
    command show the person editing, once; the audit event of the edit names its actor. The
    log line is at DEBUG: at INFO the commands' console would say it a second time."""
    notice = managed_notice(job)
    if not notice or actor == managed_actor(job.managed_by):
        return ""
    if app_settings.MANAGED_JOBS_READ_ONLY:
        raise InvalidInput("managed_by", f"{notice}; edits elsewhere are refused (CRONFLEET_MANAGED_JOBS_READ_ONLY)")
    logger.debug("%s; this edit (by %s) is drift until then, and the next apply sets it back", notice, actor or "?")
    return drift_warning(job, actor)


def drift_warning(job: Job, actor: str) -> str:
    """The sentence the API, the admin and the CLI show a person whose edit of a managed job
    was saved as drift ('' when the job is not managed, or the editor is its apply)."""
    if not job.managed_by or actor == managed_actor(job.managed_by):
        return ""
    return (
        f"job {job.tenant.slug}/{job.name} is managed by {job.managed_by!r} (schedules as code): this edit is "
        "drift until the next `manage.py schedules apply`, which sets it back; change its declaration instead"
    )


def job_update_impact(job: Job, changes: dict, *, count: int = 5) -> dict:
    """What saving `changes` would do, without saving: the fires due at once, the fires the
    edit drops, and the next `count` fires before and after."""
    check_count(count)
    now = db_now()
    edit = plan_edit(job, changes, now)
    before = upcoming_fires(job.schedule, job.next_run_at, count)
    if not edit.schedule_changed:
        return {
            "fires_now": [],
            "skipped": [],
            "next_before": before,
            "next_after": before,
            "changes": edit.diff,
            "paused": not job.enabled,
        }
    first = first_fire(edit.schedule, now)
    after = upcoming_fires(edit.schedule, first, count)
    horizon = after[-1] if after else None
    skipped = [
        {
            "at": at,
            "reason": "due and not yet dispatched; the edit drops it"
            if at <= now
            else "no longer a fire time after the edit",
        }
        for at in before
        if at not in after and (horizon is None or at <= horizon)
    ]
    return {
        "fires_now": [at for at in after if at <= now],
        "skipped": skipped,
        "next_before": before,
        "next_after": after,
        "changes": edit.diff,
        "paused": not job.enabled,
    }


def upcoming_fires(schedule: schedules.Schedule, first: datetime | None, count: int) -> list[datetime]:
    """`first` and the fires after it, `count` in all."""
    if first is None:
        return []
    return [first, *schedules.preview(schedule, first, count - 1)]


MAX_PREVIEW = 1000


def check_count(count) -> int:
    return check_int("count", count, 1, MAX_PREVIEW)


def schedule_preview(schedule: schedules.Schedule, *, count: int, after: datetime | None = None) -> list[dict]:
    """The next `count` fires in UTC and in the schedule's zone, DST anomalies flagged, and
    what the job's calendar does to each (skipped, or moved from which days)."""
    check_count(count)
    tz = schedules.zone(schedule.timezone)
    return [
        {
            "utc": at,
            "local": at.astimezone(tz),
            "anomaly": schedules.fire_anomaly(schedule, at),
            "calendar": schedules.calendar_note(schedule, at),
        }
        for at in schedules.preview(schedule, after or db_now(), count)
    ]
