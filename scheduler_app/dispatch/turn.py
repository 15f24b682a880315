"""One turn of the beat loop (run_turn): dispatch due jobs, then the recovery steps; and how
long the beat may sleep."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Min

from scheduler_app.conf import app_settings
from scheduler_app.dispatch.backpressure import _backpressure
from scheduler_app.dispatch.checkins import await_checkins, miss_checkins
from scheduler_app.dispatch.claim import claim_due_jobs
from scheduler_app.dispatch.common import QUOTA_PREFIX
from scheduler_app.dispatch.laps import Laps
from scheduler_app.dispatch.plan import (
    active_runs,
    advance_jobs,
    batch_calendars,
    cancel_runs,
    insert_runs,
    plan_batch,
    revoke_running,
)
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.dispatch.quotas import (
    QUOTA_POLL_SECONDS,
    hold_over_budget,
    release_quota_held_runs,
    tenant_budgets,
)
from scheduler_app.dispatch.recovery import (
    mark_lost_runs,
    release_buffered_runs,
    republish_stale_runs,
    requeue_due_retries,
)
from scheduler_app.dispatch.windows import BeatWindow, batch_windows, cancel_in_windows, turn_windows
from scheduler_app.models import Job, JobRun, OverlapPolicy, RunState, db_now
from scheduler_app.observability.failpoints import failpoint
from scheduler_app.observability.metrics import recorded_fires


@dataclass
class Dispatched:
    claimed: int = 0
    messages: list[RunMessage] = field(default_factory=list)
    skipped: int = 0
    held: int = 0  # fires recorded as pending because their tenant was over its quota
    recorded: list[tuple] = field(default_factory=list)  # metrics.recorded_fires of the runs inserted


@dataclass
class TurnResult:
    claimed: int = 0
    published: int = 0
    skipped: int = 0
    requeued: int = 0
    lost: int = 0
    republished: int = 0
    held: int = 0
    released: int = 0  # runs held for a quota or the manual budget and queued this turn
    busy: bool = False  # True: there may be more work right now, go again without sleeping
    held_back: list[str] = field(default_factory=list)  # job queues over the high-water mark: not claimed
    recorded: list[tuple] = field(default_factory=list)  # (queue, state, reason, dispatch lag) per run recorded
    missed: int = 0  # monitored runs ended failed: no check-in within their grace (dispatch/checkins.py)
    window_cancelled: int = 0  # running runs cancelled by an open maintenance window (dispatch/windows.py)
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step of the turn (dispatch/laps.py)


def run_turn(now: datetime, *, batch_size: int, grace: timedelta, sweep: bool = True) -> TurnResult:
    """One turn of the beat loop. Each step is bounded by `batch_size`.

    Dispatch due jobs; mark runs whose lease ran out as lost; requeue retries whose backoff
    is over; and, when `sweep` is set, publish again runs that were never started.
    """
    lap = Laps()
    backpressure = _backpressure()
    held_back = backpressure.full()  # a broker call: before any lock is taken
    lap("backpressure")
    windows = turn_windows(now)
    lap("windows")
    dispatched = dispatch_due_jobs(now, limit=batch_size, grace=grace, held_back=held_back, windows=windows, lap=lap)
    backpressure.quiet_turns = backpressure.quiet_turns + 1 if held_back and not dispatched.claimed else 0
    if dispatched.messages:  # a hit stands for runs committed and not yet published
        failpoint("beat.after_commit")
    published = publish_runs(dispatched.messages)
    failpoint("beat.after_publish")
    lap("publish")
    lost = mark_lost_runs(now, limit=batch_size)
    lap("lost")
    missed = miss_checkins(now, limit=batch_size)
    lap("checkins")
    retries = requeue_due_retries(now, limit=batch_size)
    published += publish_runs(retries)
    published += publish_runs(release_buffered_runs(now, limit=batch_size))
    lap("retries")
    released = release_quota_held_runs(now, limit=batch_size, held_back=held_back)
    backpressure.note([{"queue": message.queue} for message in released])  # manual runs' queues are watched too
    published += publish_runs(released)
    lap("quotas")
    republished = republish_stale_runs(now, limit=batch_size) if sweep else []
    published += publish_runs(republished)
    lap("sweep")
    window_cancelled = cancel_in_windows(windows, now) if windows else 0
    lap("windows")
    return TurnResult(
        claimed=dispatched.claimed,
        published=published,
        skipped=dispatched.skipped,
        requeued=len(retries),
        lost=lost,
        republished=len(republished),
        held=dispatched.held,
        released=len(released),
        busy=max(dispatched.claimed, len(retries), lost, len(released), missed) >= batch_size,
        held_back=held_back,
        recorded=dispatched.recorded,
        missed=missed,
        window_cancelled=window_cancelled,
        steps=lap.seconds,
    )


def dispatch_due_jobs(
    now: datetime,
    *,
    limit: int,
    grace: timedelta,
    held_back: Sequence[str] = (),
    windows: list[BeatWindow] | None = None,
    lap: Laps | None = None,
) -> Dispatched:
    """Claim up to `limit` due jobs, record their runs and advance their next fire times.
    `windows`: the turn's maintenance windows (dispatch/windows.py; read here when not given).

    Returns the messages to publish; the caller publishes them after this returns (the
    transaction has committed by then). `lap` (dispatch/laps.py) times its steps.
    """
    lap = lap or Laps()
    # durable: nobody may wrap this in an outer transaction and hold the locks longer.
    with transaction.atomic(durable=True):
        jobs = claim_due_jobs(now, limit=limit, held_back=held_back)
        lap("claim")
        if not jobs:
            return Dispatched()
        _backpressure().note(jobs)
        active = active_runs([job["id"] for job in jobs if job["overlap_policy"] != OverlapPolicy.ALLOW])
        lap("overlap")
        in_windows = batch_windows(jobs, now, windows)
        lap("windows")
        calendars = batch_calendars(jobs, now)
        lap("calendars")
        rows, advances, cancel = plan_batch(jobs, now, grace, active, in_windows, calendars)
        lap("plan")
        failpoint("beat.after_claim")
        rows = await_checkins(rows, jobs)  # a monitored job's fires wait for a ping: nothing is published
        lap("checkins")
        cancelled = cancel_runs(cancel, now)
        lap("overlap")
        # After cancel_runs (which may wait for a run row): tenant locks are taken last, so
        # no beat waits for a run while holding a tenant another beat's sweep waits for.
        rows = hold_over_budget(rows, tenant_budgets({job["tenant_id"] for job in jobs}, now))
        lap("quotas")
        inserted = insert_runs(rows, now)
        lap("insert")
        advance_jobs(advances)
        lap("advance")
    lap("commit")
    revoke_running(cancelled)
    by_id = {job["id"]: job for job in jobs}
    messages = [
        RunMessage.of(run_id, 1, by_id[job_id]) for run_id, job_id, state in inserted if state == RunState.QUEUED
    ]
    skipped = sum(1 for _, _, state in inserted if state == RunState.SKIPPED)
    held = sum(1 for row in rows if row.reason.startswith(QUOTA_PREFIX))
    return Dispatched(
        claimed=len(jobs),
        messages=messages,
        skipped=skipped,
        held=held,
        recorded=recorded_fires(rows, inserted, by_id, now),
    )


def seconds_until_due(now: datetime, *, cap: float, held_back: Sequence[str] = ()) -> float:
    """How long the beat may sleep: until the earliest next fire or retry (one index
    lookup each), at most `cap`.

    While queues are held back, their due jobs do not count, and at most
    Backpressure.poll_seconds(): nobody announces that workers drained a queue.

    While runs wait for a tenant's quota, at most QUOTA_POLL_SECONDS: a slot frees when a
    minute has passed since a fire or when a run finishes, and nobody announces the latter
    (one more lookup: the first such run among the pending ones, jobrun_state_recent_idx).
    """
    if JobRun.objects.filter(state=RunState.PENDING, reason__startswith=QUOTA_PREFIX).exists():
        cap = min(cap, QUOTA_POLL_SECONDS)
    if held_back:
        cap = min(cap, _backpressure().poll_seconds())
    earliest_job = (
        Job.objects.filter(enabled=True, next_run_at__isnull=False)
        .exclude(queue__in=held_back)
        .order_by("next_run_at")
        .values_list("next_run_at", flat=True)
        .first()
    )
    earliest_retry = JobRun.objects.filter(state=RunState.RETRYING).aggregate(at=Min("next_attempt_at"))["at"]
    candidates = [at for at in (earliest_job, earliest_retry) if at is not None]
    if not candidates:
        return cap
    return max(0.0, min(cap, (min(candidates) - now).total_seconds()))


def beat_settings() -> tuple[int, timedelta]:
    return app_settings.BATCH_SIZE, timedelta(seconds=app_settings.MISFIRE_GRACE_SECONDS)


def run_turn_now(batch_size: int | None = None) -> TurnResult:
    """run_turn with the database's clock and the configured limits (the command's entry)."""
    default_batch, grace = beat_settings()
    return run_turn(db_now(), batch_size=batch_size or default_batch, grace=grace)
