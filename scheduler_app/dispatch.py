"""Beat side: turn due jobs into runs and hand them to Celery.

Several beats may run at once, with no leader: due jobs are claimed with
SELECT ... FOR NO KEY UPDATE SKIP LOCKED, and JobRun is unique per (job, scheduled_at).
One short transaction claims a batch, plans its fires (pure code), inserts the runs and
advances next_run_at, with no broker call while rows are locked; publishing happens
after commit. Work per turn is O(due), never O(jobs).

Fairness and quotas: jobs are claimed in a per-tenant round robin weighted by
Tenant.weight (FAIR_CLAIM). A tenant with a dispatch quota (fires per minute, concurrent
runs) has its row locked while its budget is spent, so beats serialise per quota tenant;
fires over the budget are never dropped: they are recorded as `pending` with a reason
starting with "quota_" and queued, oldest first, as the budget frees
(release_quota_held_runs).
"""

from __future__ import annotations

import logging
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Min
from django.db.transaction import TransactionManagementError
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
from scheduler_app.metrics import recorded_fires
from scheduler_app.transitions import append_attempt
from scheduler_app.publish import (
    RunMessage,
    broker_errors,
    publish_runs,
    queue_depths,
    queue_name,
)

logger = logging.getLogger(__name__)

# The columns a beat needs to plan and publish a job's fires; nothing else is read.
CLAIM_FIELDS = (
    "id", "tenant_id", "version", "cron", "timezone", "every_seconds", "run_at", "anchor_at",
    "start_at", "end_at", "next_run_at", "misfire_policy", "catchup_window_seconds",
    "run_all_cap", "queue", "timeout_seconds", "priority", "overlap_policy", "jitter_seconds", "jitter_seed",
    "batch", "target_kind", "name",
)
INSERT_CHUNK = 500  # rows per INSERT on SQLite: 11 parameters each stays below its limit
QUOTA_PREFIX = "quota_"  # the reason of every run held back by its tenant's quota
FIRES_REASON = "quota_fires_per_minute: waiting for room under the tenant's limit of {} fires per minute"
CONCURRENCY_REASON = "quota_concurrency: waiting for room under the tenant's limit of {} concurrent runs"
QUOTA_WINDOW = timedelta(seconds=60)  # max_fires_per_minute counts runs first dispatched in this window
QUOTA_POLL_SECONDS = 1.0  # longest beat sleep while runs wait for a quota (a finished run frees a slot unannounced)
TENANT_CHUNK = 100  # quota tenants locked per release transaction
# Longest beat sleep while a queue is held back (workers drain it unannounced), doubled for
# each turn in a row that could claim nothing else, up to BACKPRESSURE_POLL_MAX_SECONDS: each
# such turn ranks the whole due set (~0.2 s of database time at 100,000 due jobs).
BACKPRESSURE_POLL_SECONDS = 0.5
BACKPRESSURE_POLL_MAX_SECONDS = 2.0
QUOTA_HELD_LABEL = "waiting for its tenant's quota"  # how active_runs reports such a run to plan_overlap


class RunRow(NamedTuple):
    """One run to insert: what varies from run to run, in the column order of sql.INSERT_RUNS.
    Its times follow from its state and the turn's clock (run_times)."""

    job_id: int
    tenant_id: int
    scheduled_at: datetime
    state: str
    reason: str
    job_version: int
    priority: int  # the job's, kept on the run: held runs are released by it


def run_times(state: str, now: datetime) -> tuple[datetime, datetime | None, datetime | None, datetime | None]:
    """created_at, enqueued_at, dispatched_at and finished_at of a run recorded `now` in
    `state`: a queued run goes to the broker now (its first dispatch), a skipped one is over.
    sql.INSERT_RUNS_PG says the same in SQL."""
    sent = now if state == RunState.QUEUED else None
    return now, sent, sent, now if state == RunState.SKIPPED else None


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
    released: int = 0  # runs held for a quota and queued this turn
    busy: bool = False  # True: there may be more work right now, go again without sleeping
    held_back: list[str] = field(default_factory=list)  # job queues over the high-water mark: not claimed
    recorded: list[tuple] = field(default_factory=list)  # (queue, state, reason, dispatch lag) per run recorded


def lock_clause(of: str = "") -> str:
    if not connection.features.has_select_for_update_skip_locked:
        return ""  # SQLite: the database serialises writers
    return f"FOR UPDATE OF {of} SKIP LOCKED" if of else "FOR UPDATE SKIP LOCKED"


def tenant_lock_clause() -> str:
    """A waiting lock on tenant rows: "FOR NO KEY UPDATE" (empty on SQLite)."""
    return "FOR NO KEY UPDATE" if connection.features.has_select_for_update else ""


def run_turn(now: datetime, *, batch_size: int, grace: timedelta, sweep: bool = True) -> TurnResult:
    """One turn of the beat loop. Each step is bounded by `batch_size`.

    Dispatch due jobs; mark runs whose lease ran out as lost; requeue retries whose backoff
    is over; and, when `sweep` is set, publish again runs that were never started.
    """
    backpressure = _backpressure()
    held_back = backpressure.full()  # a broker call: before any lock is taken
    dispatched = dispatch_due_jobs(now, limit=batch_size, grace=grace, held_back=held_back)
    backpressure.quiet_turns = backpressure.quiet_turns + 1 if held_back and not dispatched.claimed else 0
    failpoint("beat.after_commit")
    published = publish_runs(dispatched.messages)
    failpoint("beat.after_publish")
    lost = mark_lost_runs(now, limit=batch_size)
    retries = requeue_due_retries(now, limit=batch_size)
    published += publish_runs(retries)
    published += publish_runs(release_buffered_runs(now, limit=batch_size))
    released = release_quota_held_runs(now, limit=batch_size)
    published += publish_runs(released)
    republished = republish_stale_runs(now, limit=batch_size) if sweep else []
    published += publish_runs(republished)
    return TurnResult(
        claimed=dispatched.claimed,
        published=published,
        skipped=dispatched.skipped,
        requeued=len(retries),
        lost=lost,
        republished=len(republished),
        held=dispatched.held,
        released=len(released),
        busy=max(dispatched.claimed, len(retries), lost, len(released)) >= batch_size,
        held_back=held_back,
        recorded=dispatched.recorded,
    )


def dispatch_due_jobs(now: datetime, *, limit: int, grace: timedelta, held_back: Sequence[str] = ()) -> Dispatched:
    """Claim up to `limit` due jobs, record their runs and advance their next fire times.

    Returns the messages to publish; the caller publishes them after this returns (the
    transaction has committed by then).
    """
    # durable: nobody may wrap this in an outer transaction and hold the locks longer.
    with transaction.atomic(durable=True):
        jobs = claim_due_jobs(now, limit=limit, held_back=held_back)
        if not jobs:
            return Dispatched()
        _backpressure().note(jobs)
        active = active_runs([job["id"] for job in jobs if job["overlap_policy"] != OverlapPolicy.ALLOW])
        rows, advances, cancel = plan_batch(jobs, now, grace, active)
        failpoint("beat.after_claim")
        cancelled = cancel_runs(cancel, now)
        # After cancel_runs (which may wait for a run row): tenant locks are taken last, so
        # no beat waits for a run while holding a tenant another beat's sweep waits for.
        rows = hold_over_budget(rows, tenant_budgets({job["tenant_id"] for job in jobs}, now))
        inserted = insert_runs(rows, now)
        advance_jobs(advances)
    revoke_running(cancelled)
    by_id = {job["id"]: job for job in jobs}
    messages = [
        RunMessage.of(run_id, 1, by_id[job_id])
        for run_id, job_id, state in inserted
        if state == RunState.QUEUED
    ]
    skipped = sum(1 for _, _, state in inserted if state == RunState.SKIPPED)
    held = sum(1 for row in rows if row.reason.startswith(QUOTA_PREFIX))
    return Dispatched(claimed=len(jobs), messages=messages, skipped=skipped, held=held,
                      recorded=recorded_fires(rows, inserted, by_id, now))


def claim_due_jobs(now: datetime, *, limit: int, held_back: Sequence[str] = ()) -> list[dict]:
    """Lock up to `limit` due jobs for this transaction, fairly across tenants, skipping
    rows another beat holds and jobs of the broker queues in `held_back`.

    NO KEY UPDATE is enough to stop other beats and does not block inserts that
    reference the job (its runs, audit events) from other connections. While a backlog
    lasts, PostgreSQL claims from one ranking of the next batches (FairOrder).
    """
    order = _fair_order()
    if order.backlog and connection.vendor == "postgresql":
        if not order.usable(now):
            order.refresh(now, horizon=FAIR_ORDER_BATCHES * limit, held_back=held_back)
        jobs = order.claim(now, limit=limit, held_back=held_back)
        if len(jobs) == limit:
            return jobs
        order.forget()  # ran dry: claim (and rank) afresh next time
        if jobs:
            return jobs
    adapt = connection.ops.adapt_datetimefield_value
    clause, params = hold_back_clause("due", held_back)
    with connection.cursor() as cursor:
        cursor.execute(fair_claim_sql(clause), {"now": adapt(now), "limit": limit, **params})
        jobs = job_dicts(cursor.fetchall())
    order.backlog = len(jobs) == limit
    return jobs


def fair_claim_sql(held_back: str = "") -> str:
    """sql.FAIR_CLAIM for this database, leaving out what the hold_back_clause says."""
    return sql.FAIR_CLAIM.format(columns=CLAIM_COLUMNS, job=claim_job_clause(), lock=claim_lock_clause(),
                                 held_back=held_back)


def claim_listed_sql(held_back: str = "") -> str:
    """sql.CLAIM_LISTED (PostgreSQL), leaving out what the hold_back_clause says."""
    return sql.CLAIM_LISTED.format(columns=CLAIM_COLUMNS, held_back=held_back)


def hold_back_clause(alias: str, queues: Sequence[str]) -> tuple[str, dict]:
    """SQL leaving out the jobs (as `alias`) of `queues`, and its parameters; empty for none."""
    if not queues:
        return "", {}
    names = [f"held_back_{i}" for i in range(len(queues))]
    placeholders = ", ".join(f"%({name})s" for name in names)
    return f"AND {alias}.queue NOT IN ({placeholders})", dict(zip(names, queues, strict=True))


def claim_lock_clause() -> str:
    if not connection.features.has_select_for_update_skip_locked:
        return ""  # SQLite: the database serialises writers
    return "FOR NO KEY UPDATE SKIP LOCKED"


def claim_job_clause() -> str:
    return sql.CLAIM_JOB_PG.format(id="fair.id") if connection.vendor == "postgresql" else sql.CLAIM_JOB


CLAIM_COLUMNS = ", ".join(f"job.{name}" for name in CLAIM_FIELDS)
_CLAIM_DATETIMES = [i for i, name in enumerate(CLAIM_FIELDS) if name.endswith("_at")]


def job_dicts(rows: list[tuple]) -> list[dict]:
    """Claimed rows as dicts of CLAIM_FIELDS; SQLite returns datetimes as text."""
    if connection.vendor == "sqlite" and rows:
        convert = connection.ops.convert_datetimefield_value
        rows = [list(row) for row in rows]
        for row in rows:
            for i in _CLAIM_DATETIMES:
                row[i] = convert(row[i], None, connection)
    return [dict(zip(CLAIM_FIELDS, row, strict=True)) for row in rows]


FAIR_ORDER_BATCHES = 100  # batches listed by one ranking while a backlog lasts (the sort costs the same)
FAIR_ORDER_SECONDS = 2.0  # how long one ranking is claimed from (database time), at least
FAIR_ORDER_COST_FACTOR = 4  # ... and at least this many times what ranking took


class FairOrder:
    """One ranking of a large due set, claimed from for a while (PostgreSQL, per thread).

    Ranking the due jobs reads and sorts all of them (~0.2 s at 100,000 due on two cores).
    Doing that for every batch makes a spike of N due jobs cost O(N^2 / batch): measured
    with `bench dispatch` at 100,000 it nearly halved the fires per second, and a million
    would take hours. So after a claim finds a full batch (a backlog), the next claim ranks
    once, keeps the ids of the next FAIR_ORDER_BATCHES batches, and claims from that list
    in order (SKIP LOCKED and the due test as usual, so several beats share a list as they
    share the table). The list is dropped when it runs dry, when a claim finds less than a
    batch, or when it is older than FAIR_ORDER_SECONDS (or FAIR_ORDER_COST_FACTOR times
    what the ranking took, so a huge backlog is not ranked again every turn): a job that
    falls due meanwhile (a new tenant's ten, a job due again) waits at most that long
    behind the ranked backlog. Only an order is cached, never a decision: every claimed
    row is locked and checked as due.
    """

    def __init__(self) -> None:
        self.ids = array("q")  # 8 bytes an id: a list of 100,000 ints would add ~10 MiB to a beat
        self.made_at: datetime | None = None
        self.lifetime = timedelta(seconds=FAIR_ORDER_SECONDS)
        self.backlog = False  # the last claim was a full batch: more is probably due

    def usable(self, now: datetime) -> bool:
        return bool(self.ids) and self.made_at <= now < self.made_at + self.lifetime

    def refresh(self, now: datetime, *, horizon: int, held_back: Sequence[str] = ()) -> None:
        started = time.monotonic()
        self.ids = array("q")
        clause, params = hold_back_clause("due", held_back)
        with connection.cursor() as cursor:
            cursor.execute(sql.FAIR_ORDER.format(held_back=clause), {"now": now, "horizon": horizon, **params})
            while rows := cursor.fetchmany(5000):
                self.ids.extend(row[0] for row in rows)
        took = time.monotonic() - started
        self.made_at = now
        self.lifetime = timedelta(seconds=max(FAIR_ORDER_SECONDS, FAIR_ORDER_COST_FACTOR * took))

    def claim(self, now: datetime, *, limit: int, held_back: Sequence[str] = ()) -> list[dict]:
        """Lock up to `limit` listed jobs still due, in list order; drop what was passed
        (taken by another beat, no longer due, or of a queue held back)."""
        jobs: list[dict] = []
        clause, params = hold_back_clause("job", held_back)
        with connection.cursor() as cursor:
            while len(jobs) < limit and self.ids:
                window = self.ids[:2 * limit].tolist()  # room to skip what other beats took meanwhile
                cursor.execute(claim_listed_sql(clause),
                               {"ids": window, "now": now, "limit": limit - len(jobs), **params})
                rows = cursor.fetchall()
                got = len(rows)
                passed = rows[-1][0] if got == limit - len(jobs) else len(window)
                del self.ids[:passed]  # skipped ones are another beat's (or no longer due)
                jobs += job_dicts([row[1:] for row in rows])
        return jobs

    def forget(self) -> None:
        self.ids, self.made_at, self.backlog = array("q"), None, False


_local = threading.local()


def _fair_order() -> FairOrder:
    """This thread's FairOrder (a beat is one thread; tests run beats as threads)."""
    if not hasattr(_local, "fair_order"):
        _local.fair_order = FairOrder()
    return _local.fair_order


def forget_fair_order() -> None:
    """Drop this thread's cached ranking (tests that must start from a fresh claim)."""
    _fair_order().forget()


class Backpressure:
    """Keeps the broker shallow: the job queues this beat has claimed for, and which of
    them hold CRONFLEET_QUEUE_HIGH_WATER messages or more (one broker call per turn).

    The jobs of a full queue are not claimed: they stay due in the database, where the next
    claim ranks them fairly with whatever fell due meanwhile, instead of queueing behind
    a tenant's spike at the workers. A fire claimed later than the misfire grace follows
    its job's misfire policy. A queue this beat has not claimed for yet is learnt at its
    first claim, so several beats overshoot the mark by at most a batch each.
    """

    def __init__(self) -> None:
        self.queues: set[str] = set()
        self.last_full: list[str] = []
        self.quiet_turns = 0  # turns in a row that held queues back and claimed nothing

    def poll_seconds(self) -> float:
        return min(BACKPRESSURE_POLL_SECONDS * 2 ** self.quiet_turns, BACKPRESSURE_POLL_MAX_SECONDS)

    def note(self, jobs: list[dict]) -> None:
        self.queues.update(job["queue"] for job in jobs)

    def full(self) -> list[str]:
        high_water = settings.CRONFLEET_QUEUE_HIGH_WATER
        if not high_water or not self.queues:
            return []
        try:
            depths = queue_depths(sorted(self.queues))
        except broker_errors() as exc:  # claim as usual: the publish fails too and the sweep sends the runs later
            logger.warning("backpressure: could not read the broker queues' depths (%s: %s)", type(exc).__name__, exc)
            return []
        full = sorted(queue for queue, depth in depths.items() if depth >= high_water)
        if full != self.last_full:  # said when it changes, not every turn
            logger.info("backpressure: queues holding %s messages or more, not claimed for: %s", high_water,
                        [queue_name(queue) for queue in full] or "none")
            self.last_full = full
        return full


def _backpressure() -> Backpressure:
    """This thread's Backpressure (as _fair_order)."""
    if not hasattr(_local, "backpressure"):
        _local.backpressure = Backpressure()
    return _local.backpressure


def forget_backpressure() -> None:
    """Forget the queues this thread has claimed for (tests, which use a queue each)."""
    _local.backpressure = Backpressure()


def plan_batch(jobs: list[dict], now: datetime, grace: timedelta, active: dict[int, list[tuple]]):
    """Plan every claimed job's fires.

    Returns the run rows to insert, (job id, next_run_at) pairs, and the ids of active runs
    a `replace` job cancels.
    """
    cache = schedules.NextFireCache()
    rows: list[RunRow] = []
    advances: list[tuple[int, datetime | None]] = []
    cancel: dict[int, str] = {}
    for job in jobs:
        schedule = schedule_of(job["cron"], job["timezone"], job["every_seconds"], job["run_at"],
                               job["anchor_at"], job["start_at"], job["end_at"], job["jitter_seconds"],
                               job["jitter_seed"])
        rules = misfire_rules_of(job["misfire_policy"], grace, job["catchup_window_seconds"], job["run_all_cap"])
        plan = schedules.plan_fires(schedule, job["next_run_at"], now, rules, cache=cache)
        overlap = plan_overlap(job["overlap_policy"], plan.fires, active.get(job["id"], []))
        job_id, tenant_id, version, priority = job["id"], job["tenant_id"], job["version"], job["priority"]
        for fire_at in overlap.queue:
            rows.append(RunRow(job_id, tenant_id, fire_at, RunState.QUEUED.value, "", version, priority))
        for fire_at, reason in overlap.pend:
            rows.append(RunRow(job_id, tenant_id, fire_at, RunState.PENDING.value, reason, version, priority))
        for fire_at, reason in [*plan.skipped, *overlap.skip]:
            rows.append(RunRow(job_id, tenant_id, fire_at, RunState.SKIPPED.value, reason, version, priority))
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

    `active` lists the job's runs still going or held, as (id, state, celery task id). A
    pending run is held by the overlap buffer; a run waiting for its tenant's quota is
    reported with another label (QUOTA_HELD_LABEL) and counts as going: it is the job's
    next run, already admitted. Pure: decides, writes nothing.
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
    """The pending and still-going runs of `job_ids` (jobs whose overlap policy cares).

    A run waiting for its tenant's quota is labelled QUOTA_HELD_LABEL, not `pending`.
    """
    found: dict[int, list[tuple[int, str, str]]] = {}
    if not job_ids:
        return found
    states = [RunState.PENDING, *ACTIVE_STATES]
    for job_id, run_id, state, task_id, reason in (
        JobRun.objects.filter(job_id__in=job_ids, state__in=states)
        .order_by("scheduled_at").values_list("job_id", "id", "state", "celery_task_id", "reason")
    ):
        if state == RunState.PENDING and reason.startswith(QUOTA_PREFIX):
            state = QUOTA_HELD_LABEL
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
    """Queue held (buffer_one) runs whose job has no run still going.

    A quota tenant's such runs are not queued here (that would bypass its quota): they now
    wait for the quota, and release_quota_held_runs queues them within the budget.
    """
    adapt = connection.ops.adapt_datetimefield_value
    fires_head, fires_tail = FIRES_REASON.split("{}")
    concurrency_head, concurrency_tail = CONCURRENCY_REASON.split("{}")
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute(sql.HAND_OVER_BUFFERED_RUNS.format(ready=ready_buffered_runs(quota=True)), {
            "limit": limit, "fires_head": fires_head, "fires_tail": fires_tail,
            "concurrency_head": concurrency_head, "concurrency_tail": concurrency_tail,
        })
        cursor.execute(sql.RELEASE_BUFFERED_RUNS.format(ready=ready_buffered_runs(quota=False)),
                       {"now": adapt(now), "limit": limit})
        rows = cursor.fetchall()
    return messages_for(rows)


def ready_buffered_runs(*, quota: bool) -> str:
    """The select of held buffer_one runs ready to go, of tenants with or without a quota."""
    return sql.READY_BUFFERED_RUNS.format(quota="" if quota else "NOT", lock=lock_clause())


# --- quotas ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """What a tenant with a dispatch quota may send to the broker now."""

    available: int  # runs that may go out now (first trips to the broker)
    reason: str  # recorded on a run held back: the binding limit, in words
    holding: bool = False  # runs already wait for the quota; they go first, oldest first

    @property
    def for_new_runs(self) -> int:
        """Room for runs recorded now: none while older runs wait (they are released first)."""
        return 0 if self.holding else self.available


def budget_of(max_fires_per_minute: int | None, max_concurrent_runs: int | None, *, fired: int,
              in_flight: int, holding: bool = False) -> Budget | None:
    """The budget left by a tenant's limits and what it used: `fired` runs first dispatched in
    the last minute, `in_flight` runs queued or running. None: no limit. Pure."""
    limits = []
    if max_fires_per_minute is not None:
        limits.append((max_fires_per_minute - fired, FIRES_REASON.format(max_fires_per_minute)))
    if max_concurrent_runs is not None:
        limits.append((max_concurrent_runs - in_flight, CONCURRENCY_REASON.format(max_concurrent_runs)))
    if not limits:
        return None
    left, reason = min(limits, key=lambda limit: limit[0])  # the tighter limit names the reason
    return Budget(available=max(0, left), reason=reason, holding=holding)


def tenant_budgets(tenant_ids: Iterable[int], now: datetime) -> dict[int, Budget]:
    """Lock the rows of the tenants in `tenant_ids` that have a dispatch quota (in id order,
    waiting for another beat) and return their budgets; tenants without one are absent.

    The lock lasts until the caller's transaction ends: record the runs the budget allows
    before committing, so the next holder counts them.
    """
    tenant_ids = sorted(set(tenant_ids))
    if not tenant_ids:
        return {}
    ids = ", ".join(["%s"] * len(tenant_ids))
    with connection.cursor() as cursor:
        cursor.execute(sql.LOCK_QUOTA_TENANTS.format(ids=ids, lock=tenant_lock_clause()), tenant_ids)
        locked = [row[0] for row in cursor.fetchall()]
        if not locked:
            return {}
        since = connection.ops.adapt_datetimefield_value(now - QUOTA_WINDOW)
        cursor.execute(sql.TENANT_USAGE.format(ids=", ".join(["%s"] * len(locked))), [since, *locked])
        usage = cursor.fetchall()
    budgets = {}
    for tenant_id, max_fires, max_concurrent, fired, in_flight, holding in usage:
        budget = budget_of(max_fires, max_concurrent, fired=fired, in_flight=in_flight, holding=bool(holding))
        if budget is not None:
            budgets[tenant_id] = budget
    return budgets


def tenant_budget(tenant_id: int, now: datetime) -> Budget | None:
    """One tenant's dispatch budget, for runs recorded outside the beat (manual triggers,
    replays); None when the tenant has no dispatch quota.

    Call it inside transaction.atomic(): it locks the tenant's row until commit, so record
    the run in the same transaction: queued with dispatched_at = now when
    `budget is None or budget.for_new_runs > 0`, else pending with `budget.reason` (the beat
    queues it when the budget frees). `now` is the database's clock (db_now()).
    """
    if not connection.in_atomic_block:
        raise TransactionManagementError("tenant_budget locks the tenant row: call it inside transaction.atomic()")
    return tenant_budgets([tenant_id], now).get(tenant_id)


def hold_over_budget(rows: list[RunRow], budgets: dict[int, Budget]) -> list[RunRow]:
    """Planned queued runs beyond their tenant's budget wait as pending with the reason; the
    budget goes to the highest priority, then the oldest fire. Other rows and tenants without
    a budget are unchanged. Pure."""
    if not budgets:
        return rows
    queued: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if row.state == RunState.QUEUED and row.tenant_id in budgets:
            queued.setdefault(row.tenant_id, []).append(i)
    rows = list(rows)
    for tenant_id, indexes in queued.items():
        budget = budgets[tenant_id]
        indexes.sort(key=lambda i: (-rows[i].priority, rows[i].scheduled_at, rows[i].job_id))
        for i in indexes[budget.for_new_runs:]:
            rows[i] = rows[i]._replace(state=RunState.PENDING.value, reason=budget.reason)
    return rows


def release_quota_held_runs(now: datetime, *, limit: int) -> list[RunMessage]:
    """Queue runs held back by their tenant's quota as its budget frees, highest priority
    first, then oldest fire, at most `limit` per call.

    Each tenant is handled under its row lock, like dispatch spending the same budget, so
    a beat releasing and a beat dispatching never both spend it. A tenant whose quota was
    removed meanwhile has its held runs queued without limit.
    """
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(sql.QUOTA_HELD_TENANTS, {"limit": limit})
        tenants = [row[0] for row in cursor.fetchall()]
    released: list[tuple[int, int, int]] = []
    for start in range(0, len(tenants), TENANT_CHUNK):
        chunk = tenants[start:start + TENANT_CHUNK]
        with transaction.atomic(durable=True), connection.cursor() as cursor:
            budgets = tenant_budgets(chunk, now)
            for tenant_id in chunk:
                room = limit - len(released)
                if tenant_id in budgets:
                    room = min(room, budgets[tenant_id].available)
                if room <= 0:
                    continue
                cursor.execute(sql.RELEASE_QUOTA_HELD_RUNS.format(lock=lock_clause()),
                               {"now": adapt(now), "tenant": tenant_id, "limit": room})
                released += cursor.fetchall()
        if len(released) >= limit:
            break
    return messages_for(released)


def insert_runs(rows: list[RunRow], now: datetime) -> list[tuple[int, int, str]]:
    """Insert run rows recorded `now`, ignoring fires that already have a run; return
    (id, job_id, state) of the rows created here."""
    if not rows:
        return []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # One array per varying column; the times are computed from `now` in SQL. Writing
            # out the arrays is the client's cost: for 1,000 rows, 19.5 ms with all eleven
            # columns as arrays, 8.0 ms with these seven and one timestamp (psycopg mogrify).
            cursor.execute(sql.INSERT_RUNS_PG, {"now": now, **dict(zip(RunRow._fields, map(list, zip(*rows))))})
            return cursor.fetchall()
        adapt = connection.ops.adapt_datetimefield_value
        created: list[tuple[int, int, str]] = []
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = [(*row, *run_times(row.state, now)) for row in rows[start:start + INSERT_CHUNK]]
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
    """Move retrying runs whose backoff is over back to queued as their next attempt.

    Not throttled by the tenant's dispatch quota: the fire was admitted when it first went
    to the broker (its dispatched_at, which a retry keeps), and a retry is not a new fire.
    """
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            cursor.execute(
                sql.REQUEUE_DUE_RETRIES.format(lock=lock_clause()),
                {"now": adapt(now), "limit": limit},
            )
            requeued = cursor.fetchall()
    return messages_for([(run_id, attempt, job_id) for run_id, attempt, job_id, _ in requeued])


def messages_for(rows: list[tuple[int, int, int]]) -> list[RunMessage]:
    """Messages for (run id, attempt, job id) rows, with each job's queue, timeout and priority."""
    jobs = Job.objects.filter(id__in={row[2] for row in rows}).values("id", *RunMessage.JOB_FIELDS)
    by_id = {job["id"]: job for job in jobs}
    return [RunMessage.of(run_id, attempt, by_id[job_id]) for run_id, attempt, job_id in rows]


def mark_lost_runs(now: datetime, *, limit: int) -> int:
    """Take runs whose lease ran out away from their worker: retrying (attempt + 1 follows at
    once) or dead. Returns how many."""
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            statement = sql.MARK_LOST_RUNS.format(
                lock=lock_clause(), error=sql.LOST_ERROR,
                append=append_attempt("%(now)s", "'lost'", sql.LOST_ERROR))
            cursor.execute(statement, {"now": adapt(now), "limit": limit})
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
    if not queues:
        return []
    depths = queue_depths(queues)  # one broker connection for all of them, no locks held
    stale: list[tuple[int, int, int]] = []
    for queue in queues:
        before = idle_before if depths[queue] == 0 else busy_before
        with transaction.atomic(durable=True), connection.cursor() as cursor:
            cursor.execute(
                sql.REPUBLISH_STALE_RUNS.format(lock_run=lock_clause(of="run")),
                {"now": adapt(now), "before": adapt(before), "queue": queue, "limit": limit - len(stale)},
            )
            stale += cursor.fetchall()
        if len(stale) >= limit:
            break
    messages = messages_for(stale)
    if messages:
        logger.warning("publishing %s runs again (not started in time)", len(messages))
    return messages


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
        Job.objects.filter(enabled=True, next_run_at__isnull=False).exclude(queue__in=held_back)
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
