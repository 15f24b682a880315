"""Beat side: turn due jobs into runs and hand them to Celery.

Several beats may run at once, with no leader: due jobs are claimed with
SELECT ... FOR NO KEY UPDATE SKIP LOCKED, and JobRun is unique per (job, scheduled_at).
One short transaction claims a batch, plans its fires (pure code), inserts the runs and
advances next_run_at, with no broker call while rows are locked; publishing happens
after commit. Work per turn is O(due), never O(jobs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Min
from kombu.exceptions import KombuError

from scheduler_app import schedules, sql
from project.celery import app
from scheduler_app.models import (
    ACTIVE_STATES,
    AuditEvent,
    Job,
    JobRun,
    OverlapPolicy,
    RunState,
    db_now,
    misfire_rules_of,
    schedule_of,
)
from scheduler_app.failpoints import failpoint
from scheduler_app.publish import RunMessage, publish_runs, queue_depth

logger = logging.getLogger(__name__)

# The columns a beat needs to plan and publish a job's fires; nothing else is read.
CLAIM_FIELDS = (
    "id", "tenant_id", "version", "cron", "timezone", "every_seconds", "run_at", "anchor_at",
    "start_at", "end_at", "next_run_at", "misfire_policy", "catchup_window_seconds",
    "run_all_cap", "queue", "timeout_seconds", "overlap_policy",
)
INSERT_CHUNK = 500  # rows per INSERT on SQLite: 9 parameters each stays below its limit


@dataclass
class Dispatched:
    claimed: int = 0
    messages: list[RunMessage] = field(default_factory=list)
    skipped: int = 0


@dataclass
class TurnResult:
    claimed: int = 0
    published: int = 0
    skipped: int = 0
    requeued: int = 0
    lost: int = 0
    republished: int = 0
    busy: bool = False  # True: there may be more work right now, go again without sleeping


def lock_clause(of: str = "") -> str:
    if not connection.features.has_select_for_update_skip_locked:
        return ""  # SQLite: the database serialises writers
    return f"FOR UPDATE OF {of} SKIP LOCKED" if of else "FOR UPDATE SKIP LOCKED"


def run_turn(now: datetime, *, batch_size: int, grace: timedelta, sweep: bool = True) -> TurnResult:
    """One turn of the beat loop. Each step is bounded by `batch_size`.

    Dispatch due jobs; mark runs whose lease ran out as lost; requeue retries whose backoff
    is over; and, when `sweep` is set, publish again runs that were never started.
    """
    dispatched = dispatch_due_jobs(now, limit=batch_size, grace=grace)
    failpoint("beat.after_commit")
    published = publish_runs(dispatched.messages)
    failpoint("beat.after_publish")
    lost = mark_lost_runs(now, limit=batch_size)
    retries = requeue_due_retries(now, limit=batch_size)
    published += publish_runs(retries)
    published += publish_runs(release_buffered_runs(now, limit=batch_size))
    republished = republish_stale_runs(now, limit=batch_size) if sweep else []
    published += publish_runs(republished)
    return TurnResult(
        claimed=dispatched.claimed,
        published=published,
        skipped=dispatched.skipped,
        requeued=len(retries),
        lost=lost,
        republished=len(republished),
        busy=max(dispatched.claimed, len(retries), lost) >= batch_size,
    )


def dispatch_due_jobs(now: datetime, *, limit: int, grace: timedelta) -> Dispatched:
    """Claim up to `limit` due jobs, record their runs and advance their next fire times.

    Returns the messages to publish; the caller publishes them after this returns (the
    transaction has committed by then).
    """
    # durable: nobody may wrap this in an outer transaction and hold the locks longer.
    with transaction.atomic(durable=True):
        jobs = claim_due_jobs(now, limit=limit)
        if not jobs:
            return Dispatched()
        active = active_runs([job["id"] for job in jobs if job["overlap_policy"] != OverlapPolicy.ALLOW])
        rows, advances, cancel = plan_batch(jobs, now, grace, active)
        failpoint("beat.after_claim")
        cancelled = cancel_runs(cancel, now)
        inserted = insert_runs(rows)
        advance_jobs(advances)
    revoke_running(cancelled)
    by_id = {job["id"]: job for job in jobs}
    messages = [
        RunMessage(run_id, 1, by_id[job_id]["queue"], by_id[job_id]["timeout_seconds"])
        for run_id, job_id, state in inserted
        if state == RunState.QUEUED
    ]
    skipped = sum(1 for _, _, state in inserted if state == RunState.SKIPPED)
    return Dispatched(claimed=len(jobs), messages=messages, skipped=skipped)


def claim_due_jobs(now: datetime, *, limit: int) -> list[dict]:
    """Lock up to `limit` due jobs for this transaction, skipping rows another beat holds.

    NO KEY UPDATE is enough to stop other beats and does not block inserts that
    reference the job (its runs, audit events) from other connections.
    """
    due = Job.objects.due(now).select_for_update(skip_locked=True, no_key=True)
    return list(due.values(*CLAIM_FIELDS)[:limit])


def plan_batch(jobs: list[dict], now: datetime, grace: timedelta, active: dict[int, list[tuple]]):
    """Plan every claimed job's fires.

    Returns the run rows to insert, (job id, next_run_at) pairs, and the ids of active runs
    a `replace` job cancels.
    """
    cache = schedules.NextFireCache()
    rows: list[tuple] = []
    advances: list[tuple[int, datetime | None]] = []
    cancel: dict[int, str] = {}
    for job in jobs:
        schedule = schedule_of(job["cron"], job["timezone"], job["every_seconds"], job["run_at"],
                               job["anchor_at"], job["start_at"], job["end_at"])
        rules = misfire_rules_of(job["misfire_policy"], grace, job["catchup_window_seconds"], job["run_all_cap"])
        plan = schedules.plan_fires(schedule, job["next_run_at"], now, rules, cache=cache)
        overlap = plan_overlap(job["overlap_policy"], plan.fires, active.get(job["id"], []))
        base = (job["id"], job["tenant_id"])
        for fire_at in overlap.queue:
            rows.append((*base, fire_at, RunState.QUEUED.value, "", job["version"], now, now, None))
        for fire_at, reason in overlap.pend:
            rows.append((*base, fire_at, RunState.PENDING.value, reason, job["version"], now, None, None))
        for fire_at, reason in [*plan.skipped, *overlap.skip]:
            rows.append((*base, fire_at, RunState.SKIPPED.value, reason, job["version"], now, None, now))
        cancel.update(overlap.cancel)
        advances.append((job["id"], plan.next_run_at))
    return rows, advances, cancel


@dataclass
class OverlapPlan:
    queue: list[datetime] = field(default_factory=list)
    pend: list[tuple[datetime, str]] = field(default_factory=list)
    skip: list[tuple[datetime, str]] = field(default_factory=list)
    cancel: dict[int, str] = field(default_factory=dict)  # active run id -> reason


def plan_overlap(policy: str, fires: list[datetime], active: list[tuple[int, str, str]]) -> OverlapPlan:
    """Apply a job's overlap policy to the fires planned this turn (oldest first).

    `active` lists the job's runs still going or held, as (id, state, celery task id).
    Pure: decides, writes nothing.
    """
    if policy == OverlapPolicy.ALLOW or not fires:
        return OverlapPlan(queue=list(fires))
    going = [(run_id, state) for run_id, state, _ in active if state != RunState.PENDING]
    held = [run_id for run_id, state, _ in active if state == RunState.PENDING]
    plan = OverlapPlan()
    if policy == OverlapPolicy.REPLACE:
        *older, newest = fires
        plan.queue = [newest]
        plan.skip = [(at, f"overlap_replaced: superseded by the fire at {newest.isoformat()}") for at in older]
        plan.cancel = {run_id: f"overlap_replaced: by the fire at {newest.isoformat()}" for run_id, _ in going}
        plan.cancel.update({run_id: f"overlap_replaced: by the fire at {newest.isoformat()}" for run_id in held})
        return plan
    remaining = list(fires)
    if not going:
        plan.queue.append(remaining.pop(0))
    blocker = f"run {going[0][0]} still {going[0][1]}" if going else "the run queued before it"
    if policy == OverlapPolicy.BUFFER_ONE and remaining and not held:
        plan.pend.append((remaining.pop(0), f"overlap_buffered: waiting for {blocker}"))
    reason = "overlap_buffer_full" if policy == OverlapPolicy.BUFFER_ONE else "overlap_skip"
    plan.skip = [(at, f"{reason}: {blocker}") for at in remaining]
    return plan


def active_runs(job_ids: list[int]) -> dict[int, list[tuple[int, str, str]]]:
    """The pending and still-going runs of `job_ids` (jobs whose overlap policy cares)."""
    found: dict[int, list[tuple[int, str, str]]] = {}
    if not job_ids:
        return found
    states = [RunState.PENDING, *ACTIVE_STATES]
    for job_id, run_id, state, task_id in (
        JobRun.objects.filter(job_id__in=job_ids, state__in=states)
        .order_by("scheduled_at").values_list("job_id", "id", "state", "celery_task_id")
    ):
        found.setdefault(job_id, []).append((run_id, state, task_id))
    return found


def cancel_runs(cancel: dict[int, str], now: datetime) -> list[tuple[int, str]]:
    """Cancel runs replaced by a newer fire; return (celery task id, state it had) of each."""
    cancelled = []
    for run_id, reason in cancel.items():
        run = JobRun.objects.filter(id=run_id, state__in=[RunState.PENDING, *ACTIVE_STATES]).values(
            "state", "celery_task_id", "tenant_id", "job_id").first()
        if run is None:
            continue
        if JobRun.objects.filter(id=run_id, state=run["state"]).update(
            state=RunState.CANCELLED, reason=reason[:500], finished_at=now, lease_expires_at=None,
            next_attempt_at=None,
        ):
            AuditEvent.objects.create(tenant_id=run["tenant_id"], job_id=run["job_id"], run_id=run_id,
                                      action="run.cancelled", actor="beat", detail={"was": run["state"], "reason": reason})
            cancelled.append((run["celery_task_id"], run["state"]))
    return cancelled


def revoke_running(cancelled: list[tuple[str, str]]) -> None:
    """Ask workers to stop runs cancelled while running (best effort: their writes are
    refused anyway, since the run is no longer `running`)."""
    task_ids = [task_id for task_id, state in cancelled if state == RunState.RUNNING and task_id]
    if task_ids:
        try:
            app.control.revoke(task_ids, terminate=True)
        except (KombuError, OSError) as exc:  # a broadcast failure must not stop the beat; the fencing holds
            logger.warning("could not revoke replaced runs %s: %s", task_ids, exc)


def release_buffered_runs(now: datetime, *, limit: int) -> list[RunMessage]:
    """Queue held (buffer_one) runs whose job has no run still going."""
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute(sql.RELEASE_BUFFERED_RUNS.format(lock=lock_clause()), {"now": adapt(now), "limit": limit})
        rows = cursor.fetchall()
    return messages_for(rows)


def insert_runs(rows: list[tuple]) -> list[tuple[int, int, str]]:
    """Insert run rows, ignoring fires that already have a run; return (id, job_id, state)
    of the rows created here."""
    if not rows:
        return []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(sql.INSERT_RUNS_PG, [list(column) for column in zip(*rows, strict=True)])
            return cursor.fetchall()
        adapt = connection.ops.adapt_datetimefield_value
        created: list[tuple[int, int, str]] = []
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start:start + INSERT_CHUNK]
            params = [adapt(v) if isinstance(v, datetime) else v for row in chunk for v in row]
            cursor.execute(sql.INSERT_RUNS.format(rows=", ".join([sql.INSERT_RUNS_ROW] * len(chunk))), params)
            created.extend(cursor.fetchall())
        return created


def advance_jobs(advances: list[tuple[int, datetime | None]]) -> None:
    """Set each claimed job's next_run_at, in one statement on PostgreSQL."""
    if not advances:
        return
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(sql.ADVANCE_JOBS_PG, [list(column) for column in zip(*advances, strict=True)])
        else:
            adapt = connection.ops.adapt_datetimefield_value
            cursor.executemany(sql.ADVANCE_JOBS_ONE, [(adapt(at), job_id) for job_id, at in advances])


def requeue_due_retries(now: datetime, *, limit: int) -> list[RunMessage]:
    """Move retrying runs whose backoff is over back to queued as their next attempt."""
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            cursor.execute(
                sql.REQUEUE_DUE_RETRIES.format(lock=lock_clause()),
                {"now": adapt(now), "limit": limit},
            )
            requeued = cursor.fetchall()
        if not requeued:
            return []
        AuditEvent.objects.bulk_create(
            AuditEvent(tenant_id=tenant_id, job_id=job_id, run_id=run_id, action="run.requeued",
                       actor="beat", detail={"attempt": attempt})
            for run_id, attempt, job_id, tenant_id in requeued
        )
    return messages_for([(run_id, attempt, job_id) for run_id, attempt, job_id, _ in requeued])


def messages_for(rows: list[tuple[int, int, int]]) -> list[RunMessage]:
    """Messages for (run id, attempt, job id) rows, with each job's queue and timeout."""
    jobs = {
        job_id: (queue, timeout)
        for job_id, queue, timeout in Job.objects.filter(id__in={row[2] for row in rows})
        .values_list("id", "queue", "timeout_seconds")
    }
    return [RunMessage(run_id, attempt, *jobs[job_id]) for run_id, attempt, job_id in rows]


def mark_lost_runs(now: datetime, *, limit: int) -> int:
    """Take runs whose lease ran out away from their worker: retrying (attempt + 1 follows at
    once) or dead. Returns how many."""
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            cursor.execute(sql.MARK_LOST_RUNS.format(lock=lock_clause()), {"now": adapt(now), "limit": limit})
            lost = cursor.fetchall()
        if lost:
            logger.warning("marked %s runs lost (lease expired): %s", len(lost), [row[0] for row in lost][:20])
            AuditEvent.objects.bulk_create(
                AuditEvent(tenant_id=tenant_id, job_id=job_id, run_id=run_id, action="run.lost", actor="beat",
                           detail={"attempt": attempt, "worker": worker, "then": state})
                for run_id, state, attempt, job_id, tenant_id, worker in lost
            )
    return len(lost)


def republish_stale_runs(now: datetime, *, limit: int) -> list[RunMessage]:
    """Publish again queued runs that no worker started in time.

    A run's message can be lost after its row committed: its beat died before publishing,
    or the broker restarted without persistence. Where the broker queue is empty nothing is
    ahead of the run, so CRONFLEET_REPUBLISH_IDLE_SECONDS is enough; otherwise the run may
    just be waiting its turn and CRONFLEET_DISPATCH_TIMEOUT_SECONDS applies.
    """
    adapt = connection.ops.adapt_datetimefield_value
    idle_before = now - timedelta(seconds=settings.CRONFLEET_REPUBLISH_IDLE_SECONDS)
    busy_before = now - timedelta(seconds=settings.CRONFLEET_DISPATCH_TIMEOUT_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute(sql.STALE_QUEUES, {"before": adapt(max(idle_before, busy_before))})
        queues = [row[0] for row in cursor.fetchall()]
    messages: list[RunMessage] = []
    for queue in queues:
        before = idle_before if queue_depth(queue) == 0 else busy_before  # a broker call: no locks held
        with transaction.atomic(durable=True), connection.cursor() as cursor:
            cursor.execute(
                sql.REPUBLISH_STALE_RUNS.format(lock_run=lock_clause(of="run")),
                {"now": adapt(now), "before": adapt(before), "queue": queue, "limit": limit - len(messages)},
            )
            messages += messages_for(cursor.fetchall())
        if len(messages) >= limit:
            break
    if messages:
        logger.warning("publishing %s runs again (not started in time)", len(messages))
    return messages


def seconds_until_due(now: datetime, *, cap: float) -> float:
    """How long the beat may sleep: until the earliest next fire or retry (one index
    lookup each), at most `cap`."""
    earliest_job = (
        Job.objects.filter(enabled=True, next_run_at__isnull=False)
        .order_by("next_run_at").values_list("next_run_at", flat=True).first()
    )
    earliest_retry = JobRun.objects.filter(state=RunState.RETRYING).aggregate(at=Min("next_attempt_at"))["at"]
    candidates = [at for at in (earliest_job, earliest_retry) if at is not None]
    if not candidates:
        return cap
    return max(0.0, min(cap, (min(candidates) - now).total_seconds()))


def beat_settings() -> tuple[int, timedelta]:
    return settings.CRONFLEET_BATCH_SIZE, timedelta(seconds=settings.CRONFLEET_MISFIRE_GRACE_SECONDS)


def run_turn_now(batch_size: int | None = None) -> TurnResult:
    """run_turn with the database's clock and the configured limits (the command's entry)."""
    default_batch, grace = beat_settings()
    return run_turn(db_now(), batch_size=batch_size or default_batch, grace=grace)
