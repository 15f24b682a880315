"""What a user states about a job (JobSpec) and its validation: every field checked and named
in the error, the schedule normalised, the target (task, HTTP, command, SQL) checked."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from scheduler_app import queues, schedules, targets
from scheduler_app.conf import app_settings
from scheduler_app.models import (
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    Job,
    OverlapPolicy,
    TargetKind,
    Tenant,
    db_now,
)
from scheduler_app.services import chains, flexible
from scheduler_app.services.calendars import job_calendar
from scheduler_app.services.common import QuotaExceeded, check_int, lock_names
from scheduler_app.targets import task as task_target
from scheduler_app.validation import (
    InvalidInput,
    check_end_at,
    check_name,
    check_tags,
    check_text,
)

# A one-off instant this far in the past is still accepted (and fires at once).
PAST_GRACE = timedelta(minutes=5)


MAX_ATTEMPTS = 100


@dataclass
class JobSpec:
    """Everything a user states about a job; validated by job_create.

    target_kind "task" uses task_name/args/kwargs; "http" uses http (method, url, headers,
    body); "command" uses command (name, params); "sql" uses sql (name, params).
    """

    name: str
    task_name: str = ""
    target_kind: str = "task"
    http: dict | None = None
    command: dict | None = None
    sql: dict | None = None
    monitor: dict | None = None  # target_kind "monitor": grace_seconds (targets/monitor.py)
    cron: str = ""
    timezone: str = ""  # blank: the tenant's zone
    every: int | None = None
    at: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    args: list | None = None
    kwargs: dict | None = None
    queue: str = ""
    priority: int = PRIORITY_DEFAULT
    timeout_seconds: int = 300
    max_attempts: int = 3
    retry_backoff_seconds: int = 10
    retry_backoff_max_seconds: int = 3600
    misfire_policy: str = schedules.MisfirePolicy.RUN_ONCE.value
    catchup_window_seconds: int = 86400
    run_all_cap: int = 100
    overlap_policy: str = "allow"
    description: str = ""
    tags: list[str] | None = None
    jitter_seconds: int = 0
    batch: bool = False
    calendar: str = ""  # a business-day calendar of the tenant, by name; "": none
    calendar_policy: str = "skip"  # a fire on a non-business day: skip, next_business_day, previous_business_day
    pause_after_failures: int | None = None  # pause after this many failed or dead runs in a row; None: never
    after_job: str | int | None = ""  # chains: run when a run of this job of the tenant ends (name or id); "": none
    after_states: list[str] | None = None  # the parent's end states that start it; None: [succeeded]
    # A flexible window instead of cron/every/at (services/flexible.py): "daily HH:MM-HH:MM" or
    # "hourly", placed at the least loaded minute of the scope, "tenant" (default) or "queue".
    flex_window: str = ""
    flex_scope: str = ""


def check_queue(name) -> str:
    try:
        return queues.check_queue(name)
    except queues.InvalidQueue as exc:
        raise InvalidInput("queue", str(exc)) from None


def shared_queue(name: str) -> bool:
    """Whether every tenant's jobs may use queue `name`: the default queue (blank, or
    CRONFLEET_QUEUE by name), the CRONFLEET_BATCH_QUEUES, and, when CRONFLEET_QUEUES lists the
    deployment's queues, each of them (the operator shared them by listing them)."""
    return not name or bool(app_settings.QUEUES) or name == app_settings.QUEUE or name in app_settings.BATCH_QUEUES


def lock_queues(names: Iterable[object]) -> None:
    """Lock the names of the queues among `names` that are not shared, in one order (sorted),
    for the caller's transaction (check_queue_tenant's lock). A writer that will save jobs on
    several queues takes them all first: two such writers naming them in opposite orders then
    wait for one another instead of deadlocking."""
    lock_names(
        sorted({f"cronfleet.queue:{name}" for name in names if isinstance(name, str) and not shared_queue(name)})
    )


def check_queue_tenant(tenant: Tenant, queue: str) -> None:
    """Refuse a queue that is not shared (shared_queue) and that another tenant's jobs use.

    With CRONFLEET_QUEUES unset a job may name any well-formed queue, so a named queue is the
    dedicated queue of the tenant whose jobs use it: another tenant's jobs there would take its
    workers (issue 40). The refusal does not say whose it is. The queue's name is locked first
    (a transaction advisory lock), so that of two tenants claiming a fresh queue at once the
    second waits, then sees the first one's job: call it inside the transaction that saves the
    job. `tenant` may be unsaved (a document's, before import): every job is then another's.
    """
    if shared_queue(queue):
        return
    lock_queues([queue])
    # The non-blank test matches job_queue_tenant_idx's condition, so the index answers.
    if Job.objects.filter(queue=queue).exclude(queue="").exclude(tenant_id=tenant.id).exists():
        raise InvalidInput(
            "queue",
            f"queue {queue!r} is used by another tenant's jobs; name a queue of this tenant's own, "
            "or leave it blank for the default queue",
        )


def check_batch(spec: JobSpec) -> bool:
    """Batched runs share their batch's time limit: only short targets may be batched."""
    if not isinstance(spec.batch, bool):
        raise InvalidInput("batch", "must be true or false")
    cap = app_settings.BATCH_MAX_TIMEOUT_SECONDS
    if spec.batch and isinstance(spec.timeout_seconds, int) and spec.timeout_seconds > cap:
        raise InvalidInput(
            "batch",
            f"a batched job's timeout_seconds may be at most {cap} "
            "(CRONFLEET_BATCH_MAX_TIMEOUT_SECONDS); batch short targets only",
        )
    return spec.batch


MAX_PAUSE_AFTER_FAILURES = 1000


def check_pause_after_failures(value) -> int | None:
    """How many failed or dead runs in a row pause the job (ledger.autopause); None or blank: never."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAUSE_AFTER_FAILURES:
        raise InvalidInput(
            "pause_after_failures",
            f"must be a whole number from 1 to {MAX_PAUSE_AFTER_FAILURES}, or blank (never pause)",
        )
    return value


# The fields typed str, where "" stands for "none" (a caller's None too).
TEXT_FIELDS = tuple(f.name for f in fields(JobSpec) if f.type == "str")


def texts_checked(spec: JobSpec) -> JobSpec:
    """`spec` with None in a text field read as "" ("none": cron=None beside every=10, the
    tenant's zone for timezone=None), or InvalidInput naming the first text field given
    something else (a number, a list), which would otherwise reach a parser or a NOT NULL
    column."""
    for name in TEXT_FIELDS:
        value = getattr(spec, name)
        if value is not None and not isinstance(value, str):
            raise InvalidInput(name, f"must be text, not {type(value).__name__}")
    blanks: dict[str, Any] = {name: "" for name in TEXT_FIELDS if getattr(spec, name) is None}
    return replace(spec, **blanks)


def validate_spec(
    tenant: Tenant,
    spec: JobSpec,
    now: datetime,
    *,
    anchor: datetime | None = None,
    jitter_seed: int = 0,
    check_schedule_quota: bool = True,
    check_end: bool = True,
    flex_kept: flexible.Placement | None = None,
    job_id: int | None = None,
    allow_any_registered: bool = False,
    kept_task: str = "",
    kept_queue: str = "",
    parents: Mapping[str, Job] | None = None,
) -> tuple[schedules.Schedule, dict]:
    """Check every field of `spec`; return the normalised schedule and the model fields.

    An interval counts from `anchor` (an edit keeps the job's), else from now. An edit
    that leaves the schedule alone passes check_schedule_quota=False: a one-off time that
    has since passed, or a quota tightened since, does not block renaming the job; one that
    leaves end_at alone passes check_end=False (an end that has since passed is no error).
    A flexible window is placed now (reading the scope's jobs but `job_id`), unless an edit
    passes the job's placement as `flex_kept`.

    A task job names a task CRONFLEET_ALLOWED_TASKS allows. Only the admin's job forms, for
    staff with the add or change job permission, pass allow_any_registered=True: any task the
    Celery app registers then (targets/task.py). An edit passes as `kept_task` the task staff
    chose for the job beyond the allow-list, which stays allowed while the edit keeps it.

    A queue another tenant's jobs use is refused (check_queue_tenant), but for `kept_queue`, the
    queue an edited job is on already, which stays allowed while the edit keeps it.

    `parents` (jobs by name) stands for the tenant's saved jobs a chained job may follow, when
    they are not saved yet: a tenant's import checks its document before writing any row.
    """
    if not tenant.is_active:
        raise InvalidInput("tenant", f"tenant {tenant.slug!r} is not active")
    spec = texts_checked(spec)
    name = check_name("name", spec.name)
    target_config = validate_target(spec, tenant, allow_any_registered=allow_any_registered, kept_task=kept_task)
    args = [] if spec.args is None else spec.args
    kwargs = {} if spec.kwargs is None else spec.kwargs
    if not isinstance(args, list):
        raise InvalidInput("args", "must be a JSON array")
    if not isinstance(kwargs, dict):
        raise InvalidInput("kwargs", "must be a JSON object")
    try:
        policy = schedules.MisfirePolicy(spec.misfire_policy)
    except ValueError:
        choices = ", ".join(p.value for p in schedules.MisfirePolicy)
        raise InvalidInput("misfire_policy", f"must be one of {choices}") from None
    if spec.overlap_policy not in OverlapPolicy.values:
        raise InvalidInput("overlap_policy", f"must be one of {', '.join(OverlapPolicy.values)}")
    if spec.target_kind == TargetKind.MONITOR and spec.overlap_policy != OverlapPolicy.ALLOW:
        # The runs of a monitored job happen elsewhere: skipping, holding or replacing one here
        # would only end its record early, and its missed check-in would go unreported.
        raise InvalidInput(
            "overlap_policy",
            "must be allow for a monitored job (it runs elsewhere; Cronfleet cannot skip, hold or replace its runs)",
        )
    if check_schedule_quota and spec.at is not None and spec.at.tzinfo is not None and spec.at < now - PAST_GRACE:
        raise InvalidInput("at", "is in the past")
    parent = chains.after_job_of(tenant, spec.after_job, among=parents)
    after_states = chains.check_after_states(spec.after_states, chained=parent is not None)
    flex = {"flex_window": "", "flex_scope": "", "flex_note": ""}
    if parent is not None and spec.flex_window:
        raise InvalidInput("flex_window", "a chained job (after_job) has no schedule of its own, nor a window")
    if spec.flex_scope and not spec.flex_window:
        raise InvalidInput("flex_scope", "applies to a job with a flex_window only")
    if parent is None and spec.flex_window:
        spec, flex = flexible.spec_placed(tenant, spec, now, kept=flex_kept, exclude_id=job_id)
    if parent is not None:  # a chained job: no schedule of its own (services/chains.py)
        schedule = chains.chained_schedule(spec, spec.timezone or tenant.timezone)
    else:
        if check_end:
            check_end_at("end_at", spec.end_at, now)
        schedule = spec_schedule(tenant, spec, anchor=anchor or now.replace(microsecond=0), jitter_seed=jitter_seed)
        if check_schedule_quota:
            check_min_interval(tenant, schedule, now)
    queue = check_queue(spec.queue)
    if queue != kept_queue:
        check_queue_tenant(tenant, queue)
    fields = dict(
        name=name,
        task_name=spec.task_name if spec.target_kind == TargetKind.TASK else "",
        args=args,
        kwargs=kwargs,
        target_kind=spec.target_kind,
        target_config=target_config,
        queue=queue,
        priority=check_int("priority", spec.priority, PRIORITY_MIN, PRIORITY_MAX),
        timeout_seconds=check_int("timeout_seconds", spec.timeout_seconds, 1, app_settings.MAX_JOB_TIMEOUT_SECONDS),
        max_attempts=check_int("max_attempts", spec.max_attempts, 1, MAX_ATTEMPTS),
        retry_backoff_seconds=check_int("retry_backoff_seconds", spec.retry_backoff_seconds, 0, 86400),
        retry_backoff_max_seconds=check_int("retry_backoff_max_seconds", spec.retry_backoff_max_seconds, 0, 7 * 86400),
        misfire_policy=policy.value,
        catchup_window_seconds=check_int("catchup_window_seconds", spec.catchup_window_seconds, 0, 366 * 86400),
        run_all_cap=check_int("run_all_cap", spec.run_all_cap, 1, 10000),
        overlap_policy=spec.overlap_policy,
        description=check_text("description", spec.description or ""),
        tags=check_tags(spec.tags),
        cron=schedule.cron,
        timezone=schedule.timezone,
        every_seconds=schedule.every,
        run_at=schedule.at,
        anchor_at=schedule.anchor,
        start_at=schedule.start_at,
        end_at=schedule.end_at,
        jitter_seconds=schedule.jitter,
        batch=check_batch(spec),
        pause_after_failures=check_pause_after_failures(spec.pause_after_failures),
        after_job_id=parent.id if parent is not None else None,
        after_states=after_states,
        **flex,
    )
    calendar, fields["calendar_policy"] = job_calendar(tenant, spec.calendar, spec.calendar_policy)
    fields["calendar_id"] = calendar.id if calendar is not None else None
    return schedule, fields


def spec_schedule(
    tenant: Tenant, spec: JobSpec, *, anchor: datetime | None = None, jitter_seed: int = 0
) -> schedules.Schedule:
    """The validated schedule of `spec` alone (previewing a schedule not saved yet), with
    the dates of its calendar."""
    try:
        schedule = schedules.validate(
            schedules.Schedule(
                cron=spec.cron,
                timezone=spec.timezone or tenant.timezone,
                every=spec.every,
                at=spec.at,
                anchor=(anchor or db_now().replace(microsecond=0)) if spec.every is not None else None,
                start_at=spec.start_at,
                end_at=spec.end_at,
                jitter=spec.jitter_seconds,
                jitter_seed=jitter_seed,
            )
        )
    except schedules.InvalidSchedule as exc:
        raise InvalidInput("jitter_seconds" if exc.field == "jitter" else exc.field, exc.message) from None
    calendar, policy = job_calendar(tenant, spec.calendar, spec.calendar_policy)
    if calendar is None:
        return schedule
    return replace(schedule, calendar=calendar.business_calendar(db_now().year), calendar_policy=policy)


def check_min_interval(tenant: Tenant, schedule: schedules.Schedule, now: datetime) -> None:
    """Refuse a schedule that fires more often than the tenant's min_interval_seconds
    (schedules.shortest_gap: exact for intervals, the next few hundred fires for cron)."""
    least = tenant.min_interval_seconds
    shortest = schedules.shortest_gap(schedule.nominal, now) if least else None
    if shortest is None:
        return
    field = "every" if schedule.every is not None else "cron"
    if shortest < least:
        raise QuotaExceeded(
            field,
            f"fires every {shortest:g} s; tenant {tenant.slug!r} allows at least "
            f"{least} s between fires (min_interval_seconds)",
        )


def check_job_quota(tenant: Tenant) -> None:
    """Refuse a new job over the tenant's max_jobs. Call inside the creating transaction:
    the tenant row lock serialises concurrent creations."""
    if tenant.max_jobs is None:
        return
    Tenant.objects.select_for_update().filter(id=tenant.id).first()
    check_job_count(tenant, Job.objects.filter(tenant=tenant).count())


def check_job_count(tenant: Tenant, existing: int) -> None:
    """Refuse one more job for a tenant holding `existing` jobs already, over its max_jobs."""
    if tenant.max_jobs is not None and existing >= tenant.max_jobs:
        raise QuotaExceeded(
            "name", f"tenant {tenant.slug!r} has reached its quota of {tenant.max_jobs} jobs (max_jobs)"
        )


def validate_target(spec: JobSpec, tenant: Tenant, *, allow_any_registered: bool = False, kept_task: str = "") -> dict:
    """Check the job's target for `tenant`; return its target_config (for a task job, empty, or
    its mark as chosen by staff beyond the allow-list: see validate_spec)."""
    kind = targets.KINDS.get(spec.target_kind)
    if kind is None:
        raise InvalidInput("target_kind", f"must be one of {', '.join(TargetKind.values)}")
    if kind is task_target:
        return task_target.check(spec, tenant.slug, any_registered=allow_any_registered, kept=kept_task)
    return kind.check(spec, tenant.slug)
