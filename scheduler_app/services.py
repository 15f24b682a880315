"""Writes used by the commands, the admin and (later) the API.

Services validate their input (raising InvalidInput naming the field, before anything is
written), compute next_run_at with schedules.py, write in one transaction, audit the
change and wake sleeping beats. Nothing else computes schedules.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils.text import slugify

from scheduler_app import commandjobs, crypto, netguard, schedules, webhooks
from scheduler_app.models import (
    AuditEvent,
    Job,
    JobRun,
    OverlapPolicy,
    RunState,
    TargetKind,
    Tenant,
    Trigger,
    db_now,
)
from scheduler_app.publish import RunMessage, publish_runs

WAKE_CHANNEL = "cronfleet_jobs"
# A one-off instant this far in the past is still accepted (and fires at once).
PAST_GRACE = timedelta(minutes=5)
MAX_ATTEMPTS = 100


class InvalidInput(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class JobSpec:
    """Everything a user states about a job; validated by job_create.

    target_kind "task" uses task_name/args/kwargs; "http" uses http (method, url, headers,
    body); "command" uses command (name, params).
    """

    name: str
    task_name: str = ""
    target_kind: str = "task"
    http: dict | None = None
    command: dict | None = None
    cron: str = ""
    timezone: str = ""  # blank: the tenant's zone
    every: int | None = None
    at: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    args: list | None = None
    kwargs: dict | None = None
    queue: str = ""
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


def check_name(field: str, value: str, *, max_length: int = 200) -> str:
    """A display name: 1..max_length characters, no control or bidi-override characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, "must not be empty")
    value = value.strip()
    if len(value) > max_length:
        raise InvalidInput(field, f"must be at most {max_length} characters")
    for char in value:
        if unicodedata.category(char) in {"Cc", "Cf", "Cs", "Co", "Cn"}:
            raise InvalidInput(field, f"must not contain the character U+{ord(char):04X}")
    return value


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


def validate_spec(tenant: Tenant, spec: JobSpec, now: datetime) -> tuple[schedules.Schedule, dict]:
    """Check every field of `spec`; return the normalised schedule and the model fields."""
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
    if spec.at is not None and spec.at.tzinfo is not None and spec.at < now - PAST_GRACE:
        raise InvalidInput("at", "is in the past")
    try:
        schedule = schedules.validate(schedules.Schedule(
            cron=spec.cron, timezone=spec.timezone or tenant.timezone, every=spec.every, at=spec.at,
            anchor=now.replace(microsecond=0) if spec.every is not None else None,
            start_at=spec.start_at, end_at=spec.end_at,
        ))
    except schedules.InvalidSchedule as exc:
        raise InvalidInput(exc.field, exc.message) from None
    fields = dict(
        name=name, task_name=spec.task_name if spec.target_kind == TargetKind.TASK else "", args=args, kwargs=kwargs,
        target_kind=spec.target_kind, target_config=target_config,
        queue=check_name("queue", spec.queue, max_length=100) if spec.queue else "",
        timeout_seconds=_check_int("timeout_seconds", spec.timeout_seconds, 1,
                                   settings.CRONFLEET_MAX_JOB_TIMEOUT_SECONDS),
        max_attempts=_check_int("max_attempts", spec.max_attempts, 1, MAX_ATTEMPTS),
        retry_backoff_seconds=_check_int("retry_backoff_seconds", spec.retry_backoff_seconds, 0, 86400),
        retry_backoff_max_seconds=_check_int("retry_backoff_max_seconds", spec.retry_backoff_max_seconds, 0, 7 * 86400),
        misfire_policy=policy.value,
        catchup_window_seconds=_check_int("catchup_window_seconds", spec.catchup_window_seconds, 0, 366 * 86400),
        run_all_cap=_check_int("run_all_cap", spec.run_all_cap, 1, 10000),
        overlap_policy=spec.overlap_policy,
        description=spec.description or "",
        tags=list(spec.tags or []),
        cron=schedule.cron, timezone=schedule.timezone, every_seconds=schedule.every,
        run_at=schedule.at, anchor_at=schedule.anchor, start_at=schedule.start_at, end_at=schedule.end_at,
    )
    return schedule, fields


HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
MAX_HTTP_BODY = 64 * 1024
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "user-agent", "accept-encoding"}


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
    headers = http.get("headers") or {}
    if not isinstance(headers, dict):
        raise InvalidInput("http.headers", "must be an object of names to values")
    for key, value in headers.items():
        if not isinstance(value, str) or any(c in f"{key}{value}" for c in "\r\n\x00"):
            raise InvalidInput(f"http.headers.{key}", "must be text without CR, LF or NUL")
        if key.lower() in RESERVED_HEADERS or key.lower().startswith("webhook-"):
            raise InvalidInput(f"http.headers.{key}", "is set by Cronfleet and cannot be overridden")
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
    schedule, fields = validate_spec(tenant, spec, now)
    try:
        with transaction.atomic():
            job = Job.objects.create(tenant=tenant, next_run_at=first_fire(schedule, now), **fields)
            _audit(job, "job.created", actor, schedule=schedule.describe(), task=job.task_name)
            wake_beats()
    except IntegrityError:
        raise InvalidInput("name", f"tenant {tenant.slug!r} already has a job named {fields['name']!r}") from None
    return job


def job_pause(job: Job, *, note: str = "", actor: str = "") -> Job:
    """Stop a job firing. next_run_at is kept so resume can record what was missed."""
    with transaction.atomic():
        updated = Job.objects.filter(id=job.id, enabled=True).update(
            enabled=False, paused_note=note[:500], version=F("version") + 1)
        if updated:
            _audit(job, "job.paused", actor, note=note[:500])
    job.refresh_from_db()
    return job


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
            JobRun.objects.get_or_create(
                job=job, scheduled_at=missed_from,
                defaults=dict(tenant_id=job.tenant_id, state=RunState.SKIPPED, created_at=now,
                              finished_at=now, job_version=job.version,
                              reason=f"paused: missed fires from {missed_from.isoformat()} until {now.isoformat()}"),
            )
            next_run_at = schedules.next_fire_after(job.schedule, now - timedelta(microseconds=1))
        Job.objects.filter(id=job.id).update(enabled=True, paused_note="", next_run_at=next_run_at,
                                             version=job.version + 1)
        _audit(job, "job.resumed", actor, next_run_at=next_run_at.isoformat() if next_run_at else None)
        wake_beats()
    job.refresh_from_db()
    return job


def job_trigger(job: Job, *, actor: str = "") -> JobRun:
    """Record a manual run at the database's now and publish it after commit."""
    now = db_now()
    with transaction.atomic():
        run = JobRun.objects.create(job=job, tenant_id=job.tenant_id, scheduled_at=now, trigger=Trigger.MANUAL,
                                    state=RunState.QUEUED, created_at=now, enqueued_at=now,
                                    job_version=job.version)
        _audit(job, "job.triggered", actor, run_id=run.id)
        message = RunMessage(run.id, 1, job.queue, job.timeout_seconds)
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


def wake_beats() -> None:
    """Tell sleeping beats (LISTEN cronfleet_jobs) that a job changed; delivered at commit."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {WAKE_CHANNEL}")


def _audit(job: Job, action: str, actor: str, **detail) -> None:
    AuditEvent.objects.create(tenant_id=job.tenant_id, job=job, job_name=job.name, action=action,
                              actor=actor, detail=detail)
