"""Worker side: start a run by compare-and-set, run its target, record the outcome.

Every state change is a conditional UPDATE on (id, attempt, state): Celery may deliver a
message twice (acks_late), and only the first delivery of the current attempt gets past
start_run(). A worker whose attempt is no longer the run's attempt cannot write to it.
Retries are decided here and stored in the row (next_attempt_at); the beat requeues them.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, replace
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction

from scheduler_app import targets
from scheduler_app.conf import app_settings
from scheduler_app.models import Job, RunState, lifecycle
from scheduler_app.observability import logformat
from scheduler_app.observability.failpoints import failpoint
from scheduler_app.targets import PermanentFailure, RetryableFailure, to_text
from scheduler_app.worker import transitions
from scheduler_app.worker.leases import LEASES
from scheduler_app.worker.transitions import Ending, Started

logger = logging.getLogger(__name__)
FLUSH_SECONDS = 1.0  # in a batch, outcomes are written at least this often


@dataclass(frozen=True)
class Outcome:
    state: str  # the run's state after this delivery, or "duplicate" / "stale"
    detail: str = ""
    started: Started | None = None  # what the start returned (None: a duplicate), for metrics and logs
    seconds: float | None = None  # from the start to the outcome, by this worker's monotonic clock


def execute_run(run_id: int, attempt: int, *, worker: str, task_id: str = "") -> Outcome:
    return execute_runs([(run_id, attempt)], worker=worker, task_id=task_id)[0]


def execute_runs(pairs: list[tuple[int, int]], *, worker: str, task_id: str = "") -> list[Outcome]:
    """Start the runs (run id, attempt) this delivery wins, run each target in turn, and
    record their outcomes: one statement starts them all, one ends them all (or one every
    FLUSH_SECONDS in a long batch, so a worker that dies re-runs as little as possible).
    A batch's runs keep their own rows, attempts, results, retries and fencing."""
    sent = time.monotonic()
    started = start_runs(pairs, worker=worker, task_id=task_id)
    won = {s.run.id for s in started}
    outcomes = record_duplicates([pair for pair in pairs if pair[0] not in won], worker=worker)
    outcomes.update(run_in_turn(started, since=sent))
    return [outcomes[run_id] for run_id, _ in pairs]


def run_in_turn(started: list[Started], *, since: float) -> dict[int, Outcome]:
    """Run each started run's target in turn while holding their leases (since `since`, the
    time.monotonic() before their start), and write their outcomes; {run id: Outcome}."""
    seconds: dict[int, float] = {}  # each run's target, for metrics
    outcomes: dict[int, Outcome] = {}
    with LEASES.held({s.run.id: s.run.attempt for s in started}, since=since):
        endings: list[Ending] = []
        flushed_at = first = time.monotonic()
        for number, run in enumerate(started):
            if not LEASES.holds(run.run.id):  # cut off from the database: call no more targets
                endings += [not_called(rest) for rest in started[number:]]
                break
            logformat.bind_started(run)
            began = time.monotonic()
            # A batch's later runs started when their turn came, not with the batch.
            endings.append(replace(attempt_target(run), waited=began - first))
            seconds[run.run.id] = time.monotonic() - began
            if isinstance(endings[-1].cause, SoftTimeLimitExceeded):  # the batch's time is up
                endings += [time_up(rest) for rest in started[number + 1 :]]
                break
            if time.monotonic() - flushed_at >= FLUSH_SECONDS:
                outcomes.update(write_endings(endings))
                endings, flushed_at = [], time.monotonic()
        outcomes.update(write_endings(endings))
    return {run.run.id: replace(outcomes[run.run.id], started=run, seconds=seconds.get(run.run.id)) for run in started}


def start_run(run_id: int, attempt: int, *, worker: str, task_id: str = "") -> Started | None:
    """Move a run from queued to running for `attempt`; None if this delivery lost the race."""
    return transitions.start_run(run_id, attempt, worker=worker, task_id=task_id)


def start_runs(pairs: list[tuple[int, int]], *, worker: str, task_id: str = "") -> list[Started]:
    return transitions.start_runs(pairs, worker=worker, task_id=task_id)


def renew_lease(run_id: int, attempt: int) -> bool:
    """Extend the lease of a run this attempt still owns, by the database's clock."""
    return run_id in transitions.renew_leases({run_id: attempt})


def record_duplicates(pairs: list[tuple[int, int]], *, worker: str) -> dict[int, Outcome]:
    """Count deliveries that did not start their runs (already running, finished, or stale)."""
    if not pairs:
        return {}
    with transaction.atomic():  # the count and its audit rows become visible together
        return _record_duplicates(pairs, worker=worker)


def _record_duplicates(pairs: list[tuple[int, int]], *, worker: str) -> dict[int, Outcome]:
    found = transitions.count_duplicates([run_id for run_id, _ in pairs])
    outcomes = {}
    for run_id, attempt in pairs:
        if run_id not in found:
            logger.warning("run %s does not exist; dropping its message", run_id)
            outcomes[run_id] = Outcome("duplicate", "no such run")
            continue
        job_id, tenant_id, state, current = found[run_id]
        logger.info(
            "run %s attempt %s is %s (attempt %s); duplicate delivery not executed", run_id, attempt, state, current
        )
        transitions.audit(run_id, job_id, tenant_id, "run.duplicate_delivery", worker, attempt=attempt, state=state)
        outcomes[run_id] = Outcome("duplicate", f"run is {state} at attempt {current}")
    return outcomes


def attempt_target(started: Started) -> Ending:
    """Run one started run's target; how its attempt ends (not yet written)."""
    failpoint("worker.before_target")
    try:
        result = targets.perform(started)
        failpoint("worker.after_target")
    except Exception as exc:  # noqa: BLE001 - every failure is recorded on the run
        return failure(started, exc)
    return ending(started, result)


def ending(started: Started, result=None, exc: BaseException | None = None, *, waited: float = 0.0) -> Ending:
    """How an attempt ends that returned `result` or raised `exc` (not yet written), called
    `waited` seconds after its start statement."""
    if exc is not None:
        return replace(failure(started, exc), waited=waited) if waited else failure(started, exc)
    return Ending(started, RunState.SUCCEEDED, result=truncate(to_text(result)), waited=waited)


class LeaseUnconfirmed(RetryableFailure):
    """The target was not called: the attempt's lease could not be confirmed (its renewal
    failed or hangs). Retried, if the lease is still this attempt's to end."""

    def __init__(self) -> None:
        super().__init__(
            "lease_unconfirmed: the database did not confirm this attempt's lease; its target was not called"
        )


def not_called(started: Started) -> Ending:
    return failure(started, LeaseUnconfirmed())


def time_up(started: Started) -> Ending:
    """A batched run whose batch ran out of time before its turn: a timeout, retried."""
    return failure(started, SoftTimeLimitExceeded("the batch's time limit came before this run's turn"))


def write_endings(endings: list[Ending]) -> dict[int, Outcome]:
    written = transitions.end_runs(endings)
    LEASES.release([ending.started.run.id for ending in endings])
    for ending in endings:  # as the end statement moved it: for the start lag's metric
        if ending.waited:
            ending.started.run.started_at += timedelta(seconds=ending.waited)
    return {
        e.started.run.id: Outcome(RunState(e.state).value, e.error) if e.started.run.id in written else Outcome("stale")
        for e in endings
    }


def finish_run(started: Started, result) -> Outcome:
    """Record a successful attempt (or "stale" if the attempt no longer owns the run)."""
    return write_endings([ending(started, result)])[started.run.id]


def failure(started: Started, exc: BaseException) -> Ending:
    """How a failed attempt ends: retrying with backoff while attempts are left and the
    failure is retryable, else failed (not retryable) or dead (attempts used up)."""
    run, job = started.run, started.job
    error, retryable, retry_after = classify(exc, job)
    if isinstance(exc, PermanentFailure) and exc.pause_note:
        lifecycle.job_pause(Job.objects.get(id=job.id), note=exc.pause_note, actor=f"worker:{run.worker}")
    delay = None
    if not retryable:
        state = RunState.FAILED
    elif run.attempt < job.max_attempts:
        delay = retry_delay(run.attempt, base=job.retry_backoff_seconds, cap=job.retry_backoff_max_seconds)
        if retry_after is not None:  # the target said when; within our own cap
            delay = timedelta(seconds=min(max(retry_after, 0.0), job.retry_backoff_max_seconds))
        state = RunState.RETRYING
    else:
        state = RunState.DEAD
    return Ending(started, state, error=truncate(error), delay=delay, cause=exc)


def classify(exc: BaseException, job: Job) -> tuple[str, bool, float | None]:
    """(error text, retryable, seconds the target asked us to wait) for a failed attempt."""
    if isinstance(exc, SoftTimeLimitExceeded):
        return f"timeout: exceeded {job.timeout_seconds}s", True, None
    if isinstance(exc, PermanentFailure):
        return str(exc), False, None
    if isinstance(exc, RetryableFailure):
        return str(exc), True, exc.retry_after
    # The target's own error: record it, retry per the job's policy.
    logger.info("job %s failed: %r", job.id, exc)
    return f"{type(exc).__name__}: {exc}", True, None


def retry_delay(attempt: int, *, base: int, cap: int, rng: random.Random | None = None) -> timedelta:
    """Exponential backoff after failed attempt `attempt` (1-based), capped, with +/-10% jitter."""
    seconds = min(cap, base * 2 ** (attempt - 1))
    jitter = (rng or random).uniform(-0.1, 0.1) * seconds
    return timedelta(seconds=max(0.0, seconds + jitter))


def truncate(text: str, limit: int | None = None) -> str:
    limit = limit or app_settings.RESULT_MAX_BYTES
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - 20].decode("utf-8", "ignore") + f"... [{len(data)} bytes]"
