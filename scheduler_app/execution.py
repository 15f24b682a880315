"""Worker side: start a run by compare-and-set, run its target, record the outcome.

Every state change is a conditional UPDATE on (id, attempt, state): Celery may deliver a
message twice (acks_late), and only the first delivery of the current attempt gets past
start_run(). A worker whose attempt is no longer the run's attempt cannot write to it.
Retries are decided here and stored in the row (next_attempt_at); the beat requeues them.
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import logging
import random
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import DateTimeField, ExpressionWrapper, F
from django.db.models.functions import Now

from project.celery import app
from scheduler_app import commandjobs, httpclient, netguard, services, webhooks
from scheduler_app.failpoints import failpoint
from scheduler_app.fire import FireContext, firing
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, TargetKind, db_now

logger = logging.getLogger(__name__)


class PermanentFailure(Exception):
    """A failure that another attempt cannot fix (the task is not allowed, a 4xx answer, an
    address the SSRF guard refuses). `pause_note` set: also pause the job (410 Gone)."""

    def __init__(self, message: str, *, pause_note: str = "") -> None:
        super().__init__(message)
        self.pause_note = pause_note


class RetryableFailure(Exception):
    """A failure another attempt may not meet (5xx, 429, timeouts, connection errors).
    `retry_after`: seconds the target asked us to wait (429 Retry-After), bounded later."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Outcome:
    state: str  # the run's state after this delivery, or "duplicate" / "stale"
    detail: str = ""


def execute_run(run_id: int, attempt: int, *, worker: str, task_id: str = "") -> Outcome:
    run = start_run(run_id, attempt, worker=worker, task_id=task_id, now=db_now())
    if run is None:
        return record_duplicate(run_id, attempt, worker=worker)
    failpoint("worker.before_target")
    try:
        with Heartbeat(run):
            result = perform(run)
        failpoint("worker.after_target")
    except SoftTimeLimitExceeded:
        return fail_run(run, f"timeout: exceeded {run.job.timeout_seconds}s", retryable=True, now=db_now())
    except PermanentFailure as exc:
        if exc.pause_note:
            services.job_pause(run.job, note=exc.pause_note, actor=f"worker:{worker}")
        return fail_run(run, str(exc), retryable=False, now=db_now())
    except RetryableFailure as exc:
        return fail_run(run, str(exc), retryable=True, now=db_now(), retry_after=exc.retry_after)
    except Exception as exc:  # the target's own error: record it, retry per the job's policy
        logger.info("run %s attempt %s failed: %r", run_id, attempt, exc)
        return fail_run(run, f"{type(exc).__name__}: {exc}", retryable=True, now=db_now())
    return finish_run(run, result, now=db_now())


def start_run(run_id: int, attempt: int, *, worker: str, task_id: str, now: datetime) -> JobRun | None:
    """Move a run from queued to running for `attempt`; None if this delivery lost the race."""
    run = JobRun.objects.select_related("job", "job__tenant").filter(id=run_id).first()
    if run is None:
        return None
    lease = now + timedelta(seconds=settings.CRONFLEET_LEASE_SECONDS)
    won = JobRun.objects.filter(id=run_id, attempt=attempt, state=RunState.QUEUED).update(
        state=RunState.RUNNING, started_at=now, heartbeat_at=now, lease_expires_at=lease,
        worker=worker[:200], celery_task_id=task_id[:100],
    )
    if not won:
        return None
    run.state, run.attempt, run.started_at, run.worker = RunState.RUNNING, attempt, now, worker
    audit(run, "run.started", worker, attempt=attempt)
    return run


class Heartbeat:
    """Renews a running run's lease from a side thread while its target runs.

    The lease, not the job's timeout, is how a beat tells a dead or frozen worker from a
    slow one: a worker that stops heartbeating (killed, SIGSTOPped, cut off) loses the run
    after CRONFLEET_LEASE_SECONDS, and its later writes are refused (fencing).
    """

    def __init__(self, run: JobRun) -> None:
        self.run = run
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"heartbeat-run-{run.id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)

    def _beat(self) -> None:
        try:
            while not self.stopped.wait(settings.CRONFLEET_HEARTBEAT_SECONDS):
                if not renew_lease(self.run.id, self.run.attempt):
                    logger.warning("run %s attempt %s lost its lease; heartbeat stops", self.run.id, self.run.attempt)
                    return
        except DatabaseError as exc:  # the next beat retries; a missed heartbeat only shortens the lease
            logger.warning("heartbeat for run %s failed: %s", self.run.id, exc)
        finally:
            connection.close()  # this thread's own connection


def renew_lease(run_id: int, attempt: int) -> bool:
    """Extend the lease of a run this attempt still owns, by the database's clock."""
    lease = ExpressionWrapper(Now() + timedelta(seconds=settings.CRONFLEET_LEASE_SECONDS),
                              output_field=DateTimeField())
    return bool(JobRun.objects.filter(id=run_id, attempt=attempt, state=RunState.RUNNING)
                .update(heartbeat_at=Now(), lease_expires_at=lease))


def record_duplicate(run_id: int, attempt: int, *, worker: str) -> Outcome:
    """Count a delivery that did not start the run (already running, finished, or stale)."""
    JobRun.objects.filter(id=run_id).update(duplicate_deliveries=F("duplicate_deliveries") + 1)
    run = JobRun.objects.filter(id=run_id).only("id", "job_id", "tenant_id", "state", "attempt").first()
    if run is None:
        logger.warning("run %s does not exist; dropping its message", run_id)
        return Outcome("duplicate", "no such run")
    logger.info("run %s attempt %s is %s (attempt %s); duplicate delivery not executed",
                run_id, attempt, run.state, run.attempt)
    audit(run, "run.duplicate_delivery", worker, attempt=attempt, state=run.state)
    return Outcome("duplicate", f"run is {run.state} at attempt {run.attempt}")


def perform(run: JobRun):
    """Run the job's target from this worker process and return its result."""
    job: Job = run.job
    if job.target_kind == TargetKind.HTTP:
        return perform_http(run, job)
    if job.target_kind == TargetKind.COMMAND:
        return perform_command(run, job)
    if job.target_kind != TargetKind.TASK:
        raise PermanentFailure(f"unsupported target kind {job.target_kind!r}")
    if job.task_name not in settings.CRONFLEET_ALLOWED_TASKS:
        raise PermanentFailure(f"task {job.task_name!r} is not in CRONFLEET_ALLOWED_TASKS")
    if job.task_name not in app.tasks:
        app.loader.import_default_modules()  # tasks.py of every installed app
    try:
        task = app.tasks[job.task_name]
    except KeyError:
        raise PermanentFailure(f"task {job.task_name!r} is not registered in this worker") from None
    context = FireContext(
        fire_key=run.fire_key, attempt=run.attempt, scheduled_at=run.scheduled_at,
        run_id=run.id, job_id=job.id, job_name=job.name, tenant=job.tenant.slug,
    )
    with firing(context):
        return task(*job.args, **job.kwargs)


def perform_http(run: JobRun, job: Job) -> dict:
    """Call the job's URL once, signed the Standard Webhooks way; classify the answer.

    2xx succeeds; 429 (honouring Retry-After), 5xx, timeouts and connection errors retry;
    3xx (redirects are never followed), other 4xx and refused addresses do not; 410 Gone
    also pauses the job.
    """
    config = job.target_config
    body = config.get("body", "").encode()
    now = db_now()
    secrets = [webhooks.parse_secret(s) for s in services.tenant_signing_secrets(job.tenant, now)]
    signed = webhooks.headers(secrets, run.fire_key, int(now.timestamp()), body, attempt=run.attempt,
                              scheduled_at=run.scheduled_at.isoformat())
    try:
        response = httpclient.request(
            config["method"], config["url"], headers=config.get("headers", {}), signed_headers=signed,
            body=body or None, timeout=job.timeout_seconds,
            max_response_bytes=settings.CRONFLEET_HTTP_MAX_RESPONSE_BYTES,
            allowed_networks=[ipaddress.ip_network(net) for net in settings.CRONFLEET_HTTP_ALLOWED_NETWORKS],
        )
    except netguard.BlockedTarget as exc:
        raise PermanentFailure(f"{exc.reason}: {exc.detail}") from None
    except httpclient.HttpTimeout:
        raise RetryableFailure(f"timeout: no complete answer within {job.timeout_seconds}s") from None
    except (httpclient.HttpConnectionError, OSError) as exc:
        raise RetryableFailure(f"connection_error: {type(exc).__name__}: {exc}") from None
    outcome = {
        "status": response.status, "latency_ms": round(response.elapsed * 1000),
        "body": response.body.decode("utf-8", "replace"), "truncated": response.truncated,
    }
    summary = f"http {response.status}: {_to_text(outcome)}"
    if 200 <= response.status < 300:
        return outcome
    if response.status == 429:
        raise RetryableFailure(summary, retry_after=retry_after_seconds(response.headers.get("retry-after")))
    if response.status >= 500:
        raise RetryableFailure(summary)
    if response.status == 410:
        raise PermanentFailure(summary, pause_note=f"paused: {config['url']} answered 410 Gone (run {run.id})")
    if 300 <= response.status < 400:
        raise PermanentFailure(f"{redirect_refusal(config['url'], response.headers.get('location'))}: {summary}")
    raise PermanentFailure(summary)


def redirect_refusal(url: str, location: str | None) -> str:
    """Why a redirect was not followed (none ever is): `ssrf_blocked` when it pointed at an
    address the guard refuses, else `redirect_refused`."""
    if not location:
        return "redirect_refused"
    allowed = [ipaddress.ip_network(net) for net in settings.CRONFLEET_HTTP_ALLOWED_NETWORKS]
    try:
        target = netguard.check_url(urllib.parse.urljoin(url, location))
        netguard.resolve_and_check(target.host, target.port, allowed_networks=allowed)
    except netguard.BlockedTarget as exc:
        return f"ssrf_blocked: redirect to {location[:200]} ({exc.detail})"
    except OSError:  # the name does not resolve: nothing to guard against, still not followed
        pass
    return f"redirect_refused: redirect to {location[:200]} not followed"


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - db_now()).total_seconds())


def perform_command(run: JobRun, job: Job) -> dict:
    """Run the job's allow-listed program; a non-zero exit or a timeout is a retryable failure."""
    config = job.target_config
    try:
        result = commandjobs.run_command(
            config.get("name", ""), config.get("params") or {}, config=settings.CRONFLEET_COMMANDS,
            timeout=job.timeout_seconds, cwd=settings.CRONFLEET_COMMAND_CWD,
            max_output_bytes=settings.CRONFLEET_RESULT_MAX_BYTES,
            env_extra={"CRONFLEET_FIRE_KEY": run.fire_key, "CRONFLEET_ATTEMPT": str(run.attempt),
                       "CRONFLEET_SCHEDULED_AT": run.scheduled_at.isoformat()},
        )
    except commandjobs.InvalidCommand as exc:
        raise PermanentFailure(f"invalid_command: {exc}") from None
    outcome = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
               "truncated": result.truncated, "elapsed_ms": round(result.elapsed * 1000)}
    if result.timed_out:
        raise RetryableFailure(f"timeout: killed after {job.timeout_seconds}s: {_to_text(outcome)}")
    if result.exit_code != 0:
        raise RetryableFailure(f"exit {result.exit_code}: {_to_text(outcome)}")
    return outcome


def finish_run(run: JobRun, result, *, now: datetime) -> Outcome:
    written = _write_if_current(run, state=RunState.SUCCEEDED, finished_at=now, lease_expires_at=None,
                                result=truncate(_to_text(result)), error="")
    if not written:
        return Outcome("stale")
    audit(run, "run.succeeded", run.worker)
    return Outcome(RunState.SUCCEEDED.value)


def fail_run(run: JobRun, error: str, *, retryable: bool, now: datetime, retry_after: float | None = None) -> Outcome:
    job = run.job
    if not retryable:
        state, fields = RunState.FAILED, {}
    elif run.attempt < job.max_attempts:
        delay = retry_delay(run.attempt, base=job.retry_backoff_seconds, cap=job.retry_backoff_max_seconds)
        if retry_after is not None:  # the target said when; within our own cap
            delay = timedelta(seconds=min(max(retry_after, 0.0), job.retry_backoff_max_seconds))
        state, fields = RunState.RETRYING, {"next_attempt_at": now + delay}
    else:
        state, fields = RunState.DEAD, {}
    written = _write_if_current(run, state=state, finished_at=now, lease_expires_at=None,
                                error=truncate(error), **fields)
    if not written:
        return Outcome("stale")
    audit(run, f"run.{RunState(state).value}", run.worker, attempt=run.attempt, error=truncate(error, 500),
          **{k: v.isoformat() for k, v in fields.items()})
    return Outcome(RunState(state).value, error)


def _write_if_current(run: JobRun, **fields) -> bool:
    """Write `fields` only while this worker's attempt still owns the run (fencing)."""
    written = JobRun.objects.filter(id=run.id, attempt=run.attempt, state=RunState.RUNNING).update(**fields)
    if not written:
        logger.warning("run %s attempt %s is no longer ours; write rejected", run.id, run.attempt)
        audit(run, "run.stale_write_rejected", run.worker, attempt=run.attempt)
    return bool(written)


def retry_delay(attempt: int, *, base: int, cap: int, rng: random.Random | None = None) -> timedelta:
    """Exponential backoff after failed attempt `attempt` (1-based), capped, with +/-10% jitter."""
    seconds = min(cap, base * 2 ** (attempt - 1))
    jitter = (rng or random).uniform(-0.1, 0.1) * seconds
    return timedelta(seconds=max(0.0, seconds + jitter))


def truncate(text: str, limit: int | None = None) -> str:
    limit = limit or settings.CRONFLEET_RESULT_MAX_BYTES
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - 20].decode("utf-8", "ignore") + f"... [{len(data)} bytes]"


def _to_text(result) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str, sort_keys=True)
    except (TypeError, ValueError):
        return repr(result)


def audit(run: JobRun, action: str, actor: str, **detail) -> None:
    AuditEvent.objects.create(tenant_id=run.tenant_id, job_id=run.job_id, run_id=run.id,
                              action=action, actor=f"worker:{actor}" if actor else "worker", detail=detail)
