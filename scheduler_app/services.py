"""Writes used by the commands, the admin and (later) the API.

Services validate their input (raising InvalidInput naming the field, before anything is
written; the pure checks of what people write are in validation.py), compute next_run_at
with schedules.py, write in one transaction, audit the change and wake sleeping beats.
Nothing else computes schedules.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils.timezone import now as node_now
from django.utils.text import slugify

from scheduler_app import commandjobs, crypto, netguard, queues, schedules, sqljobs, webhooks
from scheduler_app.models import (
    ApiKey,
    AuditEvent,
    Job,
    JobRun,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    OverlapPolicy,
    RunState,
    TargetKind,
    Tenant,
    Trigger,
    db_now,
)
from scheduler_app.dispatch import run_times, tenant_budget
from scheduler_app.publish import RunMessage, publish_runs
from scheduler_app.validation import (
    InvalidInput,
    check_end_at,
    check_headers,
    check_line,
    check_name,
    check_tags,
    check_text,
    check_url_path,
)

WAKE_CHANNEL = "cronfleet_jobs"
# A one-off instant this far in the past is still accepted (and fires at once).
PAST_GRACE = timedelta(minutes=5)
MAX_ATTEMPTS = 100


class QuotaExceeded(InvalidInput):
    """The input is well-formed but the tenant's quota refuses it."""


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


def check_queue(name) -> str:
    try:
        return queues.check_queue(name)
    except queues.InvalidQueue as exc:
        raise InvalidInput("queue", str(exc)) from None


def check_batch(spec: JobSpec) -> bool:
    """Batched runs share their batch's time limit: only short targets may be batched."""
    if not isinstance(spec.batch, bool):
        raise InvalidInput("batch", "must be true or false")
    cap = settings.CRONFLEET_BATCH_MAX_TIMEOUT_SECONDS
    if spec.batch and isinstance(spec.timeout_seconds, int) and spec.timeout_seconds > cap:
        raise InvalidInput("batch", f"a batched job's timeout_seconds may be at most {cap} "
                                    "(CRONFLEET_BATCH_MAX_TIMEOUT_SECONDS); batch short targets only")
    return spec.batch


def _check_int(field: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be a whole number")
    if not low <= value <= high:
        raise InvalidInput(field, f"must be between {low} and {high}")
    return value


def tenant_create(*, slug: str, name: str = "", timezone: str = "UTC", actor: str = "") -> Tenant:
    if not isinstance(slug, str) or not slug or slugify(slug) != slug or len(slug) > 64:
        raise InvalidInput("slug", "use 1-64 lowercase letters, digits, hyphens or underscores")
    try:
        schedules.zone(timezone)
    except schedules.InvalidSchedule as exc:
        raise InvalidInput("timezone", exc.message) from None
    name = check_name("name", name or slug)
    try:
        with transaction.atomic():
            return Tenant.objects.create(slug=slug, name=name, timezone=timezone,
                                         webhook_secret_encrypted=crypto.encrypt(webhooks.new_secret()))
    except IntegrityError:
        raise InvalidInput("slug", f"tenant {slug!r} already exists") from None


def tenant_by_slug(slug: str, *, field: str = "tenant") -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise InvalidInput(field, f"no tenant {slug!r}")
    return tenant


def validate_spec(tenant: Tenant, spec: JobSpec, now: datetime, *, anchor: datetime | None = None,
                  jitter_seed: int = 0, check_schedule_quota: bool = True,
                  check_end: bool = True) -> tuple[schedules.Schedule, dict]:
    """Check every field of `spec`; return the normalised schedule and the model fields.

    An interval counts from `anchor` (an edit keeps the job's), else from now. An edit
    that leaves the schedule alone passes check_schedule_quota=False: a one-off time that
    has since passed, or a quota tightened since, does not block renaming the job; one that
    leaves end_at alone passes check_end=False (an end that has since passed is no error).
    """
    if not tenant.is_active:
        raise InvalidInput("tenant", f"tenant {tenant.slug!r} is not active")
    name = check_name("name", spec.name)
    target_config = validate_target(spec)
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
    if check_schedule_quota and spec.at is not None and spec.at.tzinfo is not None and spec.at < now - PAST_GRACE:
        raise InvalidInput("at", "is in the past")
    if check_end:
        check_end_at("end_at", spec.end_at, now)
    schedule = spec_schedule(tenant, spec, anchor=anchor or now.replace(microsecond=0), jitter_seed=jitter_seed)
    if check_schedule_quota:
        check_min_interval(tenant, schedule, now)
    fields = dict(
        name=name, task_name=spec.task_name if spec.target_kind == TargetKind.TASK else "", args=args, kwargs=kwargs,
        target_kind=spec.target_kind, target_config=target_config,
        queue=check_queue(spec.queue),
        priority=_check_int("priority", spec.priority, PRIORITY_MIN, PRIORITY_MAX),
        timeout_seconds=_check_int("timeout_seconds", spec.timeout_seconds, 1,
                                   settings.CRONFLEET_MAX_JOB_TIMEOUT_SECONDS),
        max_attempts=_check_int("max_attempts", spec.max_attempts, 1, MAX_ATTEMPTS),
        retry_backoff_seconds=_check_int("retry_backoff_seconds", spec.retry_backoff_seconds, 0, 86400),
        retry_backoff_max_seconds=_check_int("retry_backoff_max_seconds", spec.retry_backoff_max_seconds, 0, 7 * 86400),
        misfire_policy=policy.value,
        catchup_window_seconds=_check_int("catchup_window_seconds", spec.catchup_window_seconds, 0, 366 * 86400),
        run_all_cap=_check_int("run_all_cap", spec.run_all_cap, 1, 10000),
        overlap_policy=spec.overlap_policy,
        description=check_text("description", spec.description or ""),
        tags=check_tags(spec.tags),
        cron=schedule.cron, timezone=schedule.timezone, every_seconds=schedule.every,
        run_at=schedule.at, anchor_at=schedule.anchor, start_at=schedule.start_at, end_at=schedule.end_at,
        jitter_seconds=schedule.jitter,
        batch=check_batch(spec),
    )
    return schedule, fields


def spec_schedule(tenant: Tenant, spec: JobSpec, *, anchor: datetime | None = None,
                  jitter_seed: int = 0) -> schedules.Schedule:
    """The validated schedule of `spec` alone (previewing a schedule not saved yet)."""
    try:
        return schedules.validate(schedules.Schedule(
            cron=spec.cron, timezone=spec.timezone or tenant.timezone, every=spec.every, at=spec.at,
            anchor=(anchor or db_now().replace(microsecond=0)) if spec.every is not None else None,
            start_at=spec.start_at, end_at=spec.end_at, jitter=spec.jitter_seconds, jitter_seed=jitter_seed,
        ))
    except schedules.InvalidSchedule as exc:
        raise InvalidInput("jitter_seconds" if exc.field == "jitter" else exc.field, exc.message) from None


def check_min_interval(tenant: Tenant, schedule: schedules.Schedule, now: datetime) -> None:
    """Refuse a schedule that fires more often than the tenant's min_interval_seconds
    (schedules.shortest_gap: exact for intervals, the next few hundred fires for cron)."""
    least = tenant.min_interval_seconds
    shortest = schedules.shortest_gap(schedule.nominal, now) if least else None
    if shortest is None:
        return
    field = "every" if schedule.every is not None else "cron"
    if shortest < least:
        raise QuotaExceeded(field, f"fires every {shortest:g} s; tenant {tenant.slug!r} allows at least "
                                   f"{least} s between fires (min_interval_seconds)")


def check_job_quota(tenant: Tenant) -> None:
    """Refuse a new job over the tenant's max_jobs. Call inside the creating transaction:
    the tenant row lock serialises concurrent creations."""
    if tenant.max_jobs is None:
        return
    Tenant.objects.select_for_update().filter(id=tenant.id).first()
    if Job.objects.filter(tenant=tenant).count() >= tenant.max_jobs:
        raise QuotaExceeded("name", f"tenant {tenant.slug!r} has reached its quota of {tenant.max_jobs} jobs (max_jobs)")


HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
MAX_HTTP_BODY = 64 * 1024


def validate_target(spec: JobSpec) -> dict:
    """Check the job's target; return its target_config (empty for task jobs)."""
    if spec.target_kind == TargetKind.TASK:
        if spec.task_name not in settings.CRONFLEET_ALLOWED_TASKS:
            allowed = ", ".join(settings.CRONFLEET_ALLOWED_TASKS) or "(none)"
            raise InvalidInput("task", f"{spec.task_name!r} is not an allowed task (allowed: {allowed})")
        return {}
    if spec.target_kind == TargetKind.HTTP:
        return validate_http(spec.http or {})
    if spec.target_kind == TargetKind.COMMAND:
        command = spec.command or {}
        name, params = command.get("name", ""), command.get("params") or {}
        if not isinstance(params, dict):
            raise InvalidInput("command.params", "must be an object")
        try:
            commandjobs.build_argv(name, params, settings.CRONFLEET_COMMANDS)
        except commandjobs.InvalidCommand as exc:
            raise InvalidInput(f"command.{exc.field}" if exc.field != "command" else "command", exc.message) from None
        return {"name": name, "params": params}
    if spec.target_kind == TargetKind.SQL:
        return sqljobs.check_target(spec.sql)
    raise InvalidInput("target_kind", f"must be one of {', '.join(TargetKind.values)}")


def validate_http(http: dict) -> dict:
    method = str(http.get("method") or "POST").upper()
    if method not in HTTP_METHODS:
        raise InvalidInput("http.method", f"must be one of {', '.join(HTTP_METHODS)}")
    url = http.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidInput("http.url", "is required")
    try:
        netguard.check_url(url)
    except netguard.BlockedTarget as exc:
        raise InvalidInput("http.url", exc.detail) from None
    check_url_path("http.url", url)
    headers = check_headers("http.headers", http.get("headers") or {})
    body = http.get("body") or ""
    if not isinstance(body, str):
        raise InvalidInput("http.body", "must be text (JSON as a string)")
    if len(body.encode()) > MAX_HTTP_BODY:
        raise InvalidInput("http.body", f"must be at most {MAX_HTTP_BODY} bytes")
    return {"method": method, "url": url, "headers": headers, "body": body}


def tenant_rotate_webhook_secret(tenant: Tenant, *, overlap: timedelta = timedelta(hours=24), actor: str = "") -> str:
    """Give the tenant a new signing secret and return it (shown once). The old one keeps
    signing beside it for `overlap`, so receivers can switch without dropping deliveries."""
    secret = webhooks.new_secret()
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(id=tenant.id)
        locked.webhook_secret_previous_encrypted = locked.webhook_secret_encrypted
        locked.webhook_secret_previous_until = db_now() + overlap if locked.webhook_secret_encrypted else None
        locked.webhook_secret_encrypted = crypto.encrypt(secret)
        locked.save(update_fields=["webhook_secret_encrypted", "webhook_secret_previous_encrypted",
                                   "webhook_secret_previous_until"])
        AuditEvent.objects.create(tenant=tenant, action="tenant.secret_rotated", actor=actor,
                                  detail={"overlap_seconds": int(overlap.total_seconds())})
    tenant.refresh_from_db()
    return secret


def tenant_signing_secrets(tenant: Tenant, now: datetime) -> list[str]:
    """The secrets that sign a delivery now: the current one, and the previous one while
    its overlap lasts. Tenants made before secrets existed get their first one here."""
    if not tenant.webhook_secret_encrypted:
        with transaction.atomic():  # two workers at once: the row lock makes one of them create it
            locked = Tenant.objects.select_for_update().get(id=tenant.id)
            if not locked.webhook_secret_encrypted:
                locked.webhook_secret_encrypted = crypto.encrypt(webhooks.new_secret())
                locked.save(update_fields=["webhook_secret_encrypted"])
        tenant.refresh_from_db()
    secrets = [crypto.decrypt(tenant.webhook_secret_encrypted)]
    if tenant.webhook_secret_previous_encrypted and tenant.webhook_secret_previous_until and \
            tenant.webhook_secret_previous_until > now:
        secrets.append(crypto.decrypt(tenant.webhook_secret_previous_encrypted))
    return secrets


def first_fire(schedule: schedules.Schedule, now: datetime) -> datetime | None:
    """The first fire at or after `now` (a one-off in the recent past fires at once)."""
    if schedule.at is not None and schedule.at <= now:
        return schedule.at
    return schedules.next_fire_after(schedule, now - timedelta(microseconds=1))


def job_create(tenant: Tenant, spec: JobSpec, *, actor: str = "") -> Job:
    now = db_now()
    seed = secrets.randbelow(2**31)
    schedule, fields = validate_spec(tenant, spec, now, jitter_seed=seed)
    fields["jitter_seed"] = seed
    try:
        with transaction.atomic():
            check_job_quota(tenant)
            job = Job.objects.create(tenant=tenant, next_run_at=first_fire(schedule, now), **fields)
            _audit(job, "job.created", actor, schedule=schedule.describe(), task=job.task_name)
            wake_beats()
    except IntegrityError:
        raise InvalidInput("name", f"tenant {tenant.slug!r} already has a job named {fields['name']!r}") from None
    return job


def job_pause(job: Job, *, note: str = "", actor: str = "") -> Job:
    """Stop a job firing. next_run_at is kept so resume can record what was missed.

    The job row is locked first, so a beat that has claimed the job finishes its turn (the
    fire gets its run) before the pause; a fire already due that no beat has claimed yet is
    recorded as skipped ("paused"), so no fire due before the pause is left without a row.
    A one-off keeps its fire for resume.
    """
    note = check_line("note", note)
    with transaction.atomic():
        if Job.objects.select_for_update(no_key=True).filter(id=job.id, enabled=True).exists():
            skip_due_fires([job.id])
            Job.objects.filter(id=job.id).update(enabled=False, paused_note=note[:500], version=F("version") + 1)
            _audit(job, "job.paused", actor, note=note[:500])
    job.refresh_from_db()
    return job


def skip_due_fires(job_ids: list[int]) -> None:
    """Record the due, unclaimed fire of each of these (locked) jobs as skipped ("paused")."""
    now = db_now()
    for due in Job.objects.filter(id__in=job_ids, next_run_at__lte=now, run_at__isnull=True):
        record_skipped(due, due.next_run_at, now,
                       f"paused: due at {due.next_run_at.isoformat()}, paused at {now.isoformat()}")


def record_skipped(job: Job, scheduled_at: datetime, now: datetime, reason: str) -> None:
    """A skipped run for the fire at `scheduled_at`, unless that fire has a run already."""
    JobRun.objects.get_or_create(
        job=job, scheduled_at=scheduled_at,
        defaults=dict(tenant_id=job.tenant_id, state=RunState.SKIPPED, created_at=now, finished_at=now,
                      job_version=job.version, reason=reason),
    )


def job_resume(job: Job, *, actor: str = "") -> Job:
    """Start a paused job again from now. Fires missed while paused are recorded as one
    skipped run (at the first of them), not run."""
    now = db_now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job.id)
        if job.enabled:
            return job
        missed_from = job.next_run_at
        next_run_at = first_fire(job.schedule, now) if job.schedule.at is None else job.next_run_at
        if missed_from is not None and missed_from < now and job.schedule.at is None:
            record_skipped(job, missed_from, now,
                           f"paused: missed fires from {missed_from.isoformat()} until {now.isoformat()}")
            next_run_at = schedules.next_fire_after(job.schedule, now - timedelta(microseconds=1))
        Job.objects.filter(id=job.id).update(enabled=True, paused_note="", next_run_at=next_run_at,
                                             version=job.version + 1)
        _audit(job, "job.resumed", actor, next_run_at=next_run_at.isoformat() if next_run_at else None)
        wake_beats()
    job.refresh_from_db()
    return job


def admitted(tenant_id: int, now: datetime, count: int) -> tuple[int, str]:
    """How many of `count` runs recorded now may go to the broker at once under the tenant's
    dispatch quota, and the reason to record on the others (they wait as pending; the beat
    queues them as the budget frees). Locks the tenant row: call inside the transaction
    that records the runs."""
    budget = tenant_budget(tenant_id, now)
    if budget is None:
        return count, ""
    return min(count, budget.for_new_runs), budget.reason


def admission_fields(go: bool, reason: str, now: datetime) -> dict:
    """The columns of a run that goes to the broker now, or waits for its tenant's quota
    (its times as the beat records them: dispatch.run_times)."""
    state = RunState.QUEUED if go else RunState.PENDING
    _, enqueued_at, dispatched_at, _ = run_times(state, now)
    fields = {"state": state, "enqueued_at": enqueued_at, "dispatched_at": dispatched_at}
    return fields if go else {**fields, "reason": reason}


def job_trigger(job: Job, *, actor: str = "") -> JobRun:
    """Record a manual run at the database's now and publish it after commit (or hold it as
    pending while the tenant is over its dispatch quota)."""
    now = db_now()
    with transaction.atomic():
        go, reason = admitted(job.tenant_id, now, 1)
        run = JobRun.objects.create(job=job, tenant_id=job.tenant_id, scheduled_at=now, trigger=Trigger.MANUAL,
                                    created_at=now, job_version=job.version, priority=job.priority,
                                    **admission_fields(go, reason, now))
        _audit(job, "job.triggered", actor, run_id=run.id, state=run.state)
        if go:
            message = RunMessage.of(run.id, 1, job)
            transaction.on_commit(lambda: publish_runs([message]))
    return run


def job_trigger_reporting(job: Job, *, actor: str = "") -> tuple[JobRun, Exception | None]:
    """job_trigger in a transaction of its own, for callers that tell a person what happened.

    Publishing happens at commit; when it fails the run is already recorded (the beat's
    sweep publishes it again), so the error comes back beside the run instead of raising.
    """
    run = None
    try:
        with transaction.atomic():
            run = job_trigger(job, actor=actor)
    except Exception as exc:  # publishing runs after commit: only then is the run already saved
        if run is None or not JobRun.objects.filter(id=run.id).exists():
            raise
        return run, exc
    return run, None


def job_delete(job: Job, *, actor: str = "") -> None:
    with transaction.atomic():
        _audit(job, "job.deleted", actor)
        job.delete()


def job_preview(job_or_schedule, *, count: int, after: datetime | None = None) -> list[datetime]:
    schedule = job_or_schedule.schedule if isinstance(job_or_schedule, Job) else job_or_schedule
    return schedules.preview(schedule, after or db_now(), count)


SCHEDULE_FIELDS = ("cron", "every", "at")
SPEC_FIELDS = frozenset(JobSpec.__dataclass_fields__)


def job_spec_of(job: Job) -> JobSpec:
    """The JobSpec that describes `job` as it is saved (the base an edit is merged onto)."""
    return JobSpec(
        name=job.name, task_name=job.task_name, target_kind=job.target_kind,
        http=dict(job.target_config) if job.target_kind == TargetKind.HTTP else None,
        command=dict(job.target_config) if job.target_kind == TargetKind.COMMAND else None,
        sql=dict(job.target_config) if job.target_kind == TargetKind.SQL else None,
        cron=job.cron, timezone=job.timezone, every=job.every_seconds, at=job.run_at,
        start_at=job.start_at, end_at=job.end_at, args=job.args, kwargs=job.kwargs, queue=job.queue,
        priority=job.priority,
        timeout_seconds=job.timeout_seconds, max_attempts=job.max_attempts,
        retry_backoff_seconds=job.retry_backoff_seconds, retry_backoff_max_seconds=job.retry_backoff_max_seconds,
        misfire_policy=job.misfire_policy, catchup_window_seconds=job.catchup_window_seconds,
        run_all_cap=job.run_all_cap, overlap_policy=job.overlap_policy, description=job.description,
        tags=list(job.tags), jitter_seconds=job.jitter_seconds, batch=job.batch,
    )


@dataclass
class Edit:
    """A validated edit of a job: its new columns and what it does to the schedule."""

    fields: dict
    schedule: schedules.Schedule
    schedule_changed: bool
    diff: dict


def plan_edit(job: Job, changes: dict, now: datetime) -> Edit:
    """Merge `changes` (JobSpec field names) onto the job and validate the whole.

    Giving any of cron/every/at replaces the schedule: the kinds not given are cleared.
    """
    unknown = sorted(set(changes) - SPEC_FIELDS)
    if unknown:
        raise InvalidInput(unknown[0], "is not a job field")
    changes = dict(changes)
    if any(key in changes for key in SCHEDULE_FIELDS):
        changes.setdefault("cron", "")
        changes.setdefault("every", None)
        changes.setdefault("at", None)
    before = job_spec_of(job)
    spec = replace(before, **changes)
    schedule_keys = (*SCHEDULE_FIELDS, "timezone", "start_at", "end_at", "jitter_seconds")
    schedule_changed = any(getattr(spec, key) != getattr(before, key) for key in schedule_keys)
    # An interval keeps its anchor unless the interval itself changes.
    anchor = job.anchor_at if spec.every is not None and spec.every == job.every_seconds else None
    schedule, fields = validate_spec(job.tenant, spec, now, anchor=anchor, jitter_seed=job.jitter_seed,
                                     check_schedule_quota=schedule_changed, check_end=spec.end_at != before.end_at)
    diff = {
        key: [_jsonable(getattr(job, key)), _jsonable(value)]
        for key, value in fields.items()
        if getattr(job, key) != value
    }
    return Edit(fields=fields, schedule=schedule, schedule_changed=schedule_changed, diff=diff)


def job_update(job: Job, changes: dict, *, actor: str = "") -> Job:
    """Apply `changes` to a job (validated as a whole), bump its version and, when the
    schedule changed, compute its next fire from now. Runs already recorded are left alone."""
    now = db_now()
    edit = plan_edit(job, changes, now)
    if not edit.diff:
        return job
    fields = dict(edit.fields)
    if edit.schedule_changed:
        fields["next_run_at"] = first_fire(edit.schedule, now)
    try:
        with transaction.atomic():
            locked = Job.objects.select_for_update().get(id=job.id)
            Job.objects.filter(id=job.id).update(version=locked.version + 1, updated_at=now, **fields)
            _audit(job, "job.updated", actor, changes=edit.diff)
            wake_beats()
    except IntegrityError:
        raise InvalidInput("name", f"tenant {job.tenant.slug!r} already has a job named {fields['name']!r}") from None
    job.refresh_from_db()
    return job


def job_update_impact(job: Job, changes: dict, *, count: int = 5) -> dict:
    """What saving `changes` would do, without saving: the fires due at once, the fires the
    edit drops, and the next `count` fires before and after."""
    check_count(count)
    now = db_now()
    edit = plan_edit(job, changes, now)
    before = upcoming_fires(job.schedule, job.next_run_at, count)
    if not edit.schedule_changed:
        return {"fires_now": [], "skipped": [], "next_before": before, "next_after": before,
                "changes": edit.diff, "paused": not job.enabled}
    first = first_fire(edit.schedule, now)
    after = upcoming_fires(edit.schedule, first, count)
    horizon = after[-1] if after else None
    skipped = [
        {"at": at, "reason": "due and not yet dispatched; the edit drops it" if at <= now
         else "no longer a fire time after the edit"}
        for at in before
        if at not in after and (horizon is None or at <= horizon)
    ]
    return {"fires_now": [at for at in after if at <= now], "skipped": skipped,
            "next_before": before, "next_after": after, "changes": edit.diff, "paused": not job.enabled}


def upcoming_fires(schedule: schedules.Schedule, first: datetime | None, count: int) -> list[datetime]:
    """`first` and the fires after it, `count` in all."""
    if first is None:
        return []
    return [first, *schedules.preview(schedule, first, count - 1)]


MAX_PREVIEW = 1000


def check_count(count) -> int:
    return _check_int("count", count, 1, MAX_PREVIEW)


def schedule_preview(schedule: schedules.Schedule, *, count: int, after: datetime | None = None) -> list[dict]:
    """The next `count` fires in UTC and in the schedule's zone, DST anomalies flagged."""
    check_count(count)
    tz = schedules.zone(schedule.timezone)
    return [
        {"utc": at, "local": at.astimezone(tz), "anomaly": schedules.fire_anomaly(schedule, at)}
        for at in schedules.preview(schedule, after or db_now(), count)
    ]


MAX_BACKFILL = 1000
EARLIEST_BACKFILL = datetime(1970, 1, 1, tzinfo=UTC)


def job_backfill(job: Job, *, start: datetime, end: datetime, dry_run: bool, actor: str = "") -> dict:
    """Record runs for the job's fire times in [start, end] that have none yet, and publish
    them; with dry_run, only say which. The range must lie in the past."""
    now = db_now()
    for field, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise InvalidInput(field, "must be an instant with a UTC offset")
    if start < EARLIEST_BACKFILL:
        raise InvalidInput("start", f"must not be before {EARLIEST_BACKFILL.year}")
    if end <= start:
        raise InvalidInput("end", "must be after start")
    if end > now:
        raise InvalidInput("end", "must not be in the future (backfill fills the past)")
    fires, cursor = [], start - timedelta(microseconds=1)
    while (at := schedules.next_fire_after(job.schedule, cursor)) is not None and at <= end:
        if len(fires) == MAX_BACKFILL:
            raise InvalidInput("end", f"the range holds more than {MAX_BACKFILL} fires; backfill a shorter one")
        fires.append(at)
        cursor = at
    with transaction.atomic():
        # The job's row lock keeps beats (which skip locked jobs) from recording these fires meanwhile.
        locked = Job.objects.select_for_update().get(id=job.id)
        existing = set(JobRun.objects.filter(job=job, scheduled_at__in=fires).values_list("scheduled_at", flat=True))
        missing = [at for at in fires if at not in existing]
        created, held = [], 0
        if not dry_run and missing:
            go, reason = admitted(job.tenant_id, now, len(missing))
            created = JobRun.objects.bulk_create(
                JobRun(job=job, tenant_id=job.tenant_id, scheduled_at=at, trigger=Trigger.BACKFILL, created_at=now,
                       job_version=locked.version, priority=locked.priority,
                       **admission_fields(index < go, reason, now))
                for index, at in enumerate(missing)
            )
            held = len(created) - go
            _audit(job, "job.backfilled", actor, start=start.isoformat(), end=end.isoformat(), created=len(created),
                   held=held)
            messages = [RunMessage.of(run.id, 1, locked) for run in created[:go]]
            transaction.on_commit(lambda: publish_runs(messages))
    return {"fires": fires, "missing": missing, "created": len(created), "held": held, "existing": len(existing),
            "dry_run": dry_run}


BULK_ACTIONS = ("pause", "resume", "delete")


def jobs_bulk(tenant: Tenant, *, tag: str, action: str, note: str = "", actor: str = "") -> int:
    """Pause, resume or delete every job of `tenant` tagged `tag`; return how many changed."""
    tag, note = check_name("tag", tag, max_length=64), check_line("note", note)
    if action not in BULK_ACTIONS:
        raise InvalidInput("action", f"must be one of {', '.join(BULK_ACTIONS)}")
    ids = list(Job.objects.filter(tenant=tenant).tagged(tag).values_list("id", flat=True))
    if action == "resume":
        paused = list(Job.objects.filter(id__in=ids, enabled=False))
        return sum(1 for job in paused if job_resume(job, actor=actor).enabled)
    with transaction.atomic():
        targets = Job.objects.filter(id__in=ids)
        if action == "pause":
            targets = targets.filter(enabled=True)
        changed = list(targets.select_for_update().values_list("id", "name"))
        AuditEvent.objects.bulk_create(
            AuditEvent(tenant=tenant, job_id=None if action == "delete" else job_id, job_name=name,
                       action=f"job.{'paused' if action == 'pause' else 'deleted'}", actor=actor,
                       detail={"tag": tag, "note": note[:500]} if action == "pause" else {"tag": tag})
            for job_id, name in changed
        )
        changed_ids = [job_id for job_id, _ in changed]
        if action == "pause":
            skip_due_fires(changed_ids)
            Job.objects.filter(id__in=changed_ids).update(enabled=False, paused_note=note[:500],
                                                         version=F("version") + 1)
        else:
            Job.objects.filter(id__in=changed_ids).delete()
    return len(changed)


REPLAYABLE = (RunState.FAILED, RunState.DEAD)


def run_replay(run: JobRun, *, actor: str = "") -> JobRun:
    """Queue a failed or dead run again as its next attempt (same fire, same fire key).

    The outcome it replaces stays in the audit trail.
    """
    now = db_now()
    with transaction.atomic():
        locked = JobRun.objects.select_for_update().select_related("job").get(id=run.id)
        if locked.state not in REPLAYABLE:
            raise InvalidInput("state", f"only failed or dead runs can be replayed; this one is {locked.state}")
        attempt = locked.attempt + 1
        go, reason = admitted(locked.tenant_id, now, 1)
        JobRun.objects.filter(id=run.id).update(
            started_at=None, finished_at=None, heartbeat_at=None, lease_expires_at=None, next_attempt_at=None,
            worker="", celery_task_id="", result="", error="", attempt=attempt,
            **{"reason": f"replayed by {actor or 'someone'}", **admission_fields(go, reason, now)},
        )
        AuditEvent.objects.create(tenant_id=locked.tenant_id, job_id=locked.job_id, job_name=locked.job.name,
                                  run_id=run.id, action="run.replayed", actor=actor,
                                  detail={"attempt": attempt, "was": locked.state, "error": locked.error[:2000]})
        if go:
            message = RunMessage.of(run.id, attempt, locked.job)
            transaction.on_commit(lambda: publish_runs([message]))
    run.refresh_from_db()
    return run


TENANT_LIMITS = {  # field: (lowest, highest); None (no limit) is allowed for all but weight and min_interval_seconds
    "max_jobs": (0, 10_000_000),
    "min_interval_seconds": (0, 366 * 86400),
    "max_fires_per_minute": (0, 10_000_000),
    "max_concurrent_runs": (0, 10_000_000),
    "weight": (1, 1000),
    "api_requests_per_minute": (1, 10_000_000),
}


def tenant_update(tenant: Tenant, changes: dict, *, actor: str = "") -> Tenant:
    """Change a tenant's name, zone, active flag, quotas or weight. Quotas apply from the
    next write or dispatch; jobs already saved are not re-checked."""
    values = {}
    for key, value in changes.items():
        if key == "name":
            values[key] = check_name("name", value)
        elif key == "timezone":
            try:
                schedules.zone(value)
            except schedules.InvalidSchedule as exc:
                raise InvalidInput("timezone", exc.message) from None
            values[key] = value
        elif key == "is_active":
            if not isinstance(value, bool):
                raise InvalidInput(key, "must be true or false")
            values[key] = value
        elif key in TENANT_LIMITS:
            nullable = key not in ("weight", "min_interval_seconds")
            values[key] = None if value is None and nullable else _check_int(key, value, *TENANT_LIMITS[key])
        else:
            raise InvalidInput(key, "is not a tenant field that can be changed")
    return write_tenant_changes(tenant, values, actor=actor)


def write_tenant_changes(tenant: Tenant, values: dict, *, actor: str = "") -> Tenant:
    """Save checked `values` on the tenant with one audit row of what changed (if anything)."""
    diff = {key: [getattr(tenant, key), value] for key, value in values.items() if getattr(tenant, key) != value}
    if diff:
        with transaction.atomic():
            Tenant.objects.filter(id=tenant.id).update(**values)
            AuditEvent.objects.create(tenant=tenant, action="tenant.updated", actor=actor, detail={"changes": diff})
        tenant.refresh_from_db()
    return tenant


API_KEY_PATTERN = re.compile(r"cf_([0-9a-f]{12})_([A-Za-z0-9_-]{32})")
# last_used_at is written at most this often per key, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _key_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def check_key_quota(tenant: Tenant) -> None:
    """Refuse a new key for a tenant already holding CRONFLEET_MAX_API_KEYS_PER_TENANT
    unrevoked keys. Locks the tenant row, so concurrent creations are counted one at a time,
    until the caller's transaction ends (or a short one of its own)."""
    limit = settings.CRONFLEET_MAX_API_KEYS_PER_TENANT
    with transaction.atomic():
        Tenant.objects.select_for_update().filter(id=tenant.id).first()
        active = ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).count()
    if active >= limit:
        raise QuotaExceeded("tenant", f"tenant {tenant.slug!r} already has the most unrevoked API keys allowed "
                                      f"({limit}, CRONFLEET_MAX_API_KEYS_PER_TENANT); revoke one first")


def apikey_create(*, tenant: Tenant | None, name: str, actor: str = "") -> tuple[ApiKey, str]:
    """Make an API key; return it and its secret text, which is shown once and never kept.

    tenant None makes a staff key (tenant administration), which no quota counts."""
    name = check_name("name", name)
    prefix = secrets.token_hex(6)
    raw = f"cf_{prefix}_{secrets.token_urlsafe(24)}"
    with transaction.atomic():
        if tenant is not None:
            check_key_quota(tenant)
        key = ApiKey.objects.create(tenant=tenant, name=name, prefix=prefix, key_hash=_key_hash(raw))
        if tenant is not None:
            AuditEvent.objects.create(tenant=tenant, action="apikey.created", actor=actor,
                                      detail={"prefix": prefix, "name": name})
    return key, raw


def apikey_revoke(key: ApiKey, *, actor: str = "") -> ApiKey:
    with transaction.atomic():
        if ApiKey.objects.filter(id=key.id, revoked_at__isnull=True).update(revoked_at=db_now()) and key.tenant_id:
            AuditEvent.objects.create(tenant_id=key.tenant_id, action="apikey.revoked", actor=actor,
                                      detail={"prefix": key.prefix, "name": key.name})
    key.refresh_from_db()
    return key


def apikey_authenticate(raw: str) -> ApiKey | None:
    """The active key `raw` names, or None (malformed, unknown, revoked, inactive tenant).

    The row is found by its prefix; the hash is compared in constant time."""
    match = API_KEY_PATTERN.fullmatch(raw) if isinstance(raw, str) else None
    if match is None:
        return None
    key = ApiKey.objects.select_related("tenant").filter(prefix=match.group(1)).first()
    if key is None or not hmac.compare_digest(key.key_hash, _key_hash(raw)):
        return None
    if key.revoked_at is not None or (key.tenant is not None and not key.tenant.is_active):
        return None
    # Bookkeeping to the minute: this node's clock decides whether to write (no clock
    # query per request); the database's clock is what is written.
    now = node_now()
    if key.last_used_at is None or key.last_used_at < now - LAST_USED_RESOLUTION:
        ApiKey.objects.filter(id=key.id).update(last_used_at=Now())
        key.last_used_at = now
    return key


def _jsonable(value):
    return value.isoformat() if isinstance(value, datetime) else value


def wake_beats() -> None:
    """Tell sleeping beats (LISTEN cronfleet_jobs) that a job changed; delivered at commit."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {WAKE_CHANNEL}")


def _audit(job: Job, action: str, actor: str, **detail) -> None:
    AuditEvent.objects.create(tenant_id=job.tenant_id, job=job, job_name=job.name, action=action,
                              actor=actor, detail=detail)
