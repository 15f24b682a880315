"""Retention: the ledger stays bounded. At 100,000 fires a minute it grows by 144 million
rows a day; retention owns the policy that says which finished runs go (its fields and
their sources live in policy.py), and this module the
background pruning that deletes them without holding up beats or workers.

The policy. A run that reached a terminal state (succeeded, failed, dead, skipped,
cancelled) is kept for `retention_days` after it finished, a failed or dead one for
`retention_failed_days` (never less than the others), and whatever their age a job keeps
its newest `retention_keep_last` runs by fire time (so a monthly job under a 30-day policy
still shows its last runs). 0 days means forever, 0 runs no floor. Each field is set on the
job, else on its tenant, else by the setting (CRONFLEET_RETENTION_*). Runs still going
(pending, queued, running, retrying, lost) are never touched, whatever their age. Every
rule only ever keeps runs, so no setting prunes more than what its own number says.

Audit events are not pruned with their runs: events about runs (run_id set: lost leases,
replays, duplicate deliveries) go on their own age, CRONFLEET_RETENTION_AUDIT_DAYS; those
about jobs, tenants and keys (operators' actions) are kept.

Why batched deletes and not time partitions. Dropping a partition of old runs would be
cheaper per row, but it drops a time slice for everybody, while the policy is per tenant
and per job, keeps failed runs longer and keeps a job's last runs whatever their age: the
rows still wanted would have to be copied out of each partition first, which is a delete
by another name. Partitioning would also reshape the table around its key: the primary key
and the unique (job_id, scheduled_at) must then include the partition column (fine for
scheduled_at, but the primary key would become (id, scheduled_at) behind Django's back),
every lookup by id (the worker's start and finish, the API's run detail) would probe every
partition, a backfill or a one-off far in the future needs a partition to land in, and
turning the existing table into a partitioned one rewrites it. So pruning is a batched
DELETE of rows selected oldest first, one bounded batch per transaction: only the runs
the policy lets go are locked (FOR UPDATE SKIP LOCKED, in physical order), so a run being
replayed or finished right now is locked by its writer and simply passed over, a beat
never waits for a lock, and a run kept is read but never written. Nothing references a
run by foreign key (audit events keep a plain run_id) and no trigger fires on a delete,
so a delete touches the run's row and nothing else; the space is reused after VACUUM
(autovacuum), so the table stops growing once pruning keeps up.

Where a deleted run's cost goes (EXPLAIN (ANALYZE, BUFFERS, WAL) of a 5,000-run batch
over 10,000,000 runs of 10 tenants, after a CHECKPOINT): the heap pages it dirties and the
WAL it writes (a full-page image for each page first dirtied after a checkpoint). A
tenant's runs lie among the other tenants' (written by the same fires), a tenth of each
page: one tenant's walk at a time dirtied 962 pages and wrote 8.4 MB of WAL for 5,000
runs. A batch shared among the units (each looks at batch_size / units) prunes the runs of
one span of time for every tenant together: 100 pages and 1.3 MB for 4,847 runs, and
locking only those it deletes, 5.4 µs a run against 6.8 (medians of 4 alternated). The
rows' indexes cost nothing at delete time (VACUUM removes their entries later): fewer
indexes make VACUUM, not the batch, cheaper; jobrun's plain tenant_id index, redundant
with jobrun_tenant_recent_idx, was dropped for that and for dispatch. The runs' JSON
(attempts) is small enough to stay inline: no TOAST rows to delete. A batch commits
without waiting for its WAL flush (BATCH_SETTINGS).

How pruning walks. The work comes in units: each tenant's runs, and each job with a
retention of its own, in two classes (failed and dead; the others), each with one cutoff
(now - days). A tenant's unit walks its runs oldest fire first through
jobrun_tenant_recent_idx (tenant_id, scheduled_at): a run finishes after its fire time, so
every run finished before the cutoff lies below the cutoff in that index (were one ever
to finish before its fire time, it would only be pruned later, never earlier), and no
index of finished_at is needed: dispatch and the workers pay for no new index. A job's unit
walks jobrun_one_per_fire (job_id, scheduled_at) the same way. Each unit remembers how far
it has looked (scheduled_at, id), so a run the policy keeps (its job's floor, its own
job's longer policy, a run finished long after its fire time) is looked at once per walk,
not once per batch; every CRONFLEET_RETENTION_RESCAN_SECONDS the walks start again from
the oldest run. One statement serves many units (unnest + LATERAL), each looking at its
share of `batch_size` runs, so its cost is bounded whatever the backlog; a unit that
looked at its whole share is due again at once, the others at the next check.

The statement is PostgreSQL's (LATERAL, arrays, SKIP LOCKED). SQLite, the embedded
first-run database with one writer and a small ledger, gets the same policy through the
ORM, a unit at a time (walk_portable).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import Q

from scheduler_app.conf import app_settings
from scheduler_app.ledger.policy import FIELDS, Policy, resolve
from scheduler_app.ledger.spentcalls import prune_spent_calls
from scheduler_app.models import (
    JOB_RETENTION_SET,
    TERMINAL_STATES,
    Job,
    JobRun,
    RunState,
    Tenant,
    db_now,
)

logger = logging.getLogger(__name__)

TERMINAL = [state.value for state in TERMINAL_STATES]
FAILED = [RunState.FAILED.value, RunState.DEAD.value]
OTHERS = [state for state in TERMINAL if state not in FAILED]
MAX_UNITS = 500  # units one statement looks into
LOG_SECONDS = 60  # a beat logs what it pruned at most this often


# --- pruning: the statements ---------------------------------------------------------------

# Look at up to %(share)s runs of each unit given as arrays, from where it got to (after_at,
# after_id) up to its cutoff, oldest fire first, and mark the ones the policy lets go
# (doomed): terminal in the unit's class, finished before the cutoff, not among the newest
# keep_last runs of their job and, in a tenant's unit, not of a job with a retention of its
# own (own_rules: that job's unit decides). {column} is tenant_id or job_id: the LATERAL
# walks jobrun_tenant_recent_idx or jobrun_one_per_fire for one unit at a time. Every unit
# gets the same share of the batch, so the tenants whose runs were written together (the
# same fire times) are pruned together: a batch empties few heap pages rather than a tenth
# of many. The floor reads the job's newest runs through jobrun_one_per_fire, only for runs
# old enough to go otherwise. Nothing is locked here: only the doomed rows are, below.
_EXAMINE = """
WITH unit AS (
    SELECT unit.key, unit.cutoff, unit.failed, unit.keep_last, unit.own_rules,
           coalesce(unit.after_at, '-infinity') AS after_at, coalesce(unit.after_id, 0) AS after_id,
           unit.position
      FROM unnest(%(key)s::bigint[], %(cutoff)s::timestamptz[], %(failed)s::boolean[], %(keep_last)s::integer[],
                  %(own_rules)s::boolean[], %(after_at)s::timestamptz[], %(after_id)s::bigint[])
           WITH ORDINALITY AS unit (key, cutoff, failed, keep_last, own_rules, after_at, after_id, position)
),
examined AS MATERIALIZED (
    SELECT unit.position, run.id, run.ctid, run.scheduled_at, unit.cutoff, unit.failed,
           coalesce(run.finished_at < unit.cutoff
                    AND run.state = ANY (CASE WHEN unit.failed THEN %(failed_states)s::varchar[]
                                              ELSE %(other_states)s::varchar[] END)
                    AND NOT (unit.own_rules AND EXISTS (
                            SELECT FROM scheduler_app_job AS job
                             WHERE job.id = run.job_id
                               AND (job.retention_days IS NOT NULL OR job.retention_failed_days IS NOT NULL
                                    OR job.retention_keep_last IS NOT NULL)))
                    AND (unit.keep_last = 0 OR run.scheduled_at < (
                            SELECT newer.scheduled_at
                              FROM scheduler_app_jobrun AS newer
                             WHERE newer.job_id = run.job_id
                             ORDER BY newer.scheduled_at DESC
                            OFFSET unit.keep_last - 1
                             LIMIT 1)),
                    false) AS doomed
      FROM unit
     CROSS JOIN LATERAL (
           SELECT run.ctid, run.id, run.job_id, run.scheduled_at, run.finished_at, run.state
             FROM scheduler_app_jobrun AS run
            WHERE run.{column} = unit.key
              AND run.scheduled_at < unit.cutoff
              AND run.scheduled_at >= unit.after_at
              AND (run.scheduled_at, run.id) > (unit.after_at, unit.after_id)
            ORDER BY run.scheduled_at, run.id
            LIMIT %(share)s
           ) AS run
)"""
_WALKED = """
SELECT examined.position, count(*), count(*) FILTER (WHERE examined.doomed),
       (array_agg(examined.scheduled_at ORDER BY examined.scheduled_at DESC, examined.id DESC))[1],
       (array_agg(examined.id ORDER BY examined.scheduled_at DESC, examined.id DESC))[1],
       {deleted}
  FROM examined
 GROUP BY examined.position
"""

# prune: lock the doomed runs in their physical order and delete them. Rows another
# transaction holds (a replay, a late finish, another pruner) are skipped, never waited
# for; a row changed since the snapshot has moved (a new ctid) or is judged again by what
# it is now (a failed run replayed meanwhile is queued): it stays. The runs kept are never
# locked, so a walk over them writes nothing. One row per unit looked into: how many runs,
# how many doomed, the last one looked at, and (the same on every row) how many were deleted.
PRUNE_RUNS = (
    _EXAMINE
    + """,
locked AS MATERIALIZED (
    SELECT run.ctid
      FROM examined
      JOIN scheduler_app_jobrun AS run ON run.ctid = examined.ctid
     WHERE examined.doomed
       AND run.id = examined.id
       AND run.finished_at < examined.cutoff
       AND run.state = ANY (CASE WHEN examined.failed THEN %(failed_states)s::varchar[]
                                 ELSE %(other_states)s::varchar[] END)
     ORDER BY examined.ctid
       FOR UPDATE OF run SKIP LOCKED
),
gone AS (
    DELETE FROM scheduler_app_jobrun AS run
     USING locked
     WHERE run.ctid = locked.ctid
    RETURNING run.id
)"""
    + _WALKED.replace("{deleted}", "(SELECT count(*) FROM gone)")
)

# prune_runs --dry-run: the same walk, nothing locked or deleted.
COUNT_RUNS = _EXAMINE + _WALKED.replace("{deleted}", "0")

# How each batch is planned (SET LOCAL, in the batch's transaction). The walk's rows come
# out of jobrun_tenant_recent_idx in fire-time order, already nearly sorted for
# ORDER BY scheduled_at, id (an incremental sort), and the LIMIT stops it after a batch. The
# planner, which cannot see the unit's bounds (they come from arrays), prefers a bitmap scan
# of the whole unit below its cutoff plus a sort: measured at 2,000,000 rows, 100,000 rows
# read and sorted for every 5,000 returned (240 ms against 27 ms). And the statement's
# estimated cost is high enough for JIT, which spent 30 ms compiling a 60 ms batch.
PLANNER_SETTINGS = "SET LOCAL enable_bitmapscan = off; SET LOCAL jit = off"
# And the batch's commit does not wait for its WAL to reach the disk: were the server to
# crash just after, the batch's runs would be back, and pruned again by a later batch.
BATCH_SETTINGS = PLANNER_SETTINGS + "; SET LOCAL synchronous_commit = off"

# Events about runs older than the cutoff, oldest first, through audit_run_created_idx.
PRUNE_AUDIT = """
DELETE FROM scheduler_app_auditevent
 WHERE id IN (SELECT id
                FROM scheduler_app_auditevent
               WHERE run_id IS NOT NULL
                 AND created_at < %(cutoff)s
                     {tenant}
               ORDER BY created_at
               LIMIT %(limit)s
                 {lock})
"""
COUNT_AUDIT = """
SELECT count(*)
  FROM scheduler_app_auditevent
 WHERE run_id IS NOT NULL
   AND created_at < %(cutoff)s
       {tenant}
"""


# --- pruning: the walk -----------------------------------------------------------------------


@dataclass
class Unit:
    """One walk: a tenant's runs (those of its jobs without a retention of their own), or
    one such job's runs; failed and dead ones, or the others."""

    kind: str  # "tenant" or "job"
    key: int  # its id
    failed: bool
    days: int
    keep_last: int
    own_rules: bool = False  # a tenant's unit: some of its jobs have their own retention
    after: tuple[datetime, int] | None = None  # the last run looked at (scheduled_at, id)
    visit_at: float = 0.0  # monotonic: when to look again

    @property
    def ident(self) -> tuple[str, int, bool]:
        return self.kind, self.key, self.failed

    def same_rules(self, other: Unit) -> bool:
        return (self.days, self.keep_last, self.own_rules) == (other.days, other.keep_last, other.own_rules)


@dataclass
class Progress:
    batches: int = 0
    examined: int = 0  # runs looked at
    doomed: int = 0  # runs the policy lets go (in a dry run: would delete)
    pruned: int = 0  # runs deleted
    audit_pruned: int = 0  # audit events deleted (dry run: would delete)
    calls_pruned: int = 0  # spent django.tasks calls' jobs deleted with the audit (ledger/spentcalls.py)
    seconds: float = 0.0  # spent in the statements


def share_of(units: list, limit: int) -> int:
    """Runs each unit of a batch looks at: the batch shared evenly."""
    return max(1, -(-limit // len(units)))


def batch_statement(units: list[Unit], now: datetime, *, limit: int, dry_run: bool = False) -> tuple[str, dict]:
    """PRUNE_RUNS (COUNT_RUNS for a dry run) and its parameters for `units`, all of one kind."""
    params = {
        "share": share_of(units, limit),
        "key": [u.key for u in units],
        "cutoff": [now - timedelta(days=u.days) for u in units],
        "failed": [u.failed for u in units],
        "keep_last": [u.keep_last for u in units],
        "own_rules": [u.own_rules for u in units],
        "after_at": [u.after[0] if u.after else None for u in units],
        "after_id": [u.after[1] if u.after else None for u in units],
        "failed_states": FAILED,
        "other_states": OTHERS,
    }
    column = "tenant_id" if units[0].kind == "tenant" else "job_id"
    return (COUNT_RUNS if dry_run else PRUNE_RUNS).format(column=column), params


def walk_portable(units: list[Unit], now: datetime, *, limit: int, dry_run: bool = False) -> list[tuple]:
    """The batch of PRUNE_RUNS (COUNT_RUNS) through the ORM, with its result rows, for a
    database without LATERAL, arrays or SKIP LOCKED: SQLite, where one writer at a time and
    a small ledger make a unit-by-unit walk enough. The policy is judged in Python."""
    results, share, doomed_ids = [], share_of(units, limit), []
    for position, unit in enumerate(units, start=1):
        cutoff = now - timedelta(days=unit.days)
        runs = JobRun.objects.filter(**{f"{unit.kind}_id": unit.key}, scheduled_at__lt=cutoff)
        if unit.after is not None:
            runs = runs.filter(Q(scheduled_at__gt=unit.after[0]) | Q(scheduled_at=unit.after[0], id__gt=unit.after[1]))
        seen = list(
            runs.order_by("scheduled_at", "id").values_list("id", "job_id", "scheduled_at", "finished_at", "state")[
                :share
            ]
        )
        if not seen:
            continue
        states = FAILED if unit.failed else OTHERS
        doomed = [row for row in seen if row[3] is not None and row[3] < cutoff and row[4] in states]
        if unit.own_rules and doomed:
            own = set(
                Job.objects.filter(JOB_RETENTION_SET, id__in={row[1] for row in doomed}).values_list("id", flat=True)
            )
            doomed = [row for row in doomed if row[1] not in own]
        if unit.keep_last and doomed:
            floors = {
                job_id: JobRun.objects.filter(job_id=job_id)
                .order_by("-scheduled_at")
                .values_list("scheduled_at", flat=True)[unit.keep_last - 1 : unit.keep_last]
                .first()
                for job_id in {row[1] for row in doomed}
            }
            doomed = [row for row in doomed if floors[row[1]] is not None and row[2] < floors[row[1]]]
        doomed_ids += [row[0] for row in doomed]
        results.append((position, len(seen), len(doomed), seen[-1][2], seen[-1][0]))
    deleted = 0
    if doomed_ids and not dry_run:
        deleted, _ = JobRun.objects.filter(id__in=doomed_ids, state__in=TERMINAL).delete()
    return [(*row, deleted) for row in results]


def units_for(
    tenants: Iterable[tuple[int, dict]], own_jobs: Iterable[tuple[int, int, dict]], tenant_fields: Mapping[int, dict]
) -> list[Unit]:
    """The walks the policy asks for. `tenants`: (id, fields); `own_jobs`: (id, tenant id,
    fields) of jobs with a retention of their own; `tenant_fields`: every tenant's fields by
    id (a job's blanks come from its tenant). Pure."""
    units = []
    with_own = {tenant_id for _, tenant_id, _ in own_jobs}
    for tenant_id, fields in tenants:
        policy = resolve(("tenant", fields))[0]
        units += _units("tenant", tenant_id, policy, own_rules=tenant_id in with_own)
    for job_id, tenant_id, fields in own_jobs:
        policy = resolve(("job", fields), ("tenant", tenant_fields.get(tenant_id, {})))[0]
        units += _units("job", job_id, policy)
    return units


def _units(kind: str, key: int, policy: Policy, *, own_rules: bool = False) -> list[Unit]:
    return [
        Unit(kind, key, failed, days, policy.keep_last, own_rules)
        for failed in (False, True)
        if (days := policy.kept_days(failed=failed)) is not None
    ]


class Pruner:
    """Prunes the ledger one bounded batch at a time, remembering where each walk got to.

    A beat keeps one for its lifetime and calls step() once per loop turn; prune_runs makes
    one and calls prune_batch() until nothing is due. Several beats each have their own:
    they share the rows through SKIP LOCKED, as they share due jobs.
    """

    def __init__(
        self,
        *,
        batch_size: int | None = None,
        tenant_id: int | None = None,
        dry_run: bool = False,
        check_seconds: float | None = None,
        rescan_seconds: float | None = None,
        busy_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.batch_size = batch_size or app_settings.RETENTION_BATCH_SIZE
        self.tenant_id = tenant_id
        self.dry_run = dry_run
        self.check_seconds = check_seconds if check_seconds is not None else app_settings.RETENTION_CHECK_SECONDS
        self.rescan_seconds = rescan_seconds if rescan_seconds is not None else app_settings.RETENTION_RESCAN_SECONDS
        self.busy_seconds = busy_seconds if busy_seconds is not None else app_settings.RETENTION_BUSY_SECONDS
        self.clock = clock
        self.units: dict[tuple[str, int, bool], Unit] = {}
        self.loaded_at: float | None = None
        self.rescan_at: float | None = None
        self.audit_at = 0.0
        self.last_batch_at = float("-inf")
        self.progress = Progress()
        self.logged = (clock(), Progress())  # when the beat last logged, and the progress then
        # Units waiting equally long are taken in an order of this pruner's own, so that several
        # beats start on different tenants rather than all walking (and skipping) the same rows.
        self.order = random.Random().randrange(1 << 32)
        self.portable = connection.vendor != "postgresql"  # walk_portable instead of PRUNE_RUNS

    # -- the beat's step --

    def step(self, *, idle: bool) -> bool:
        """The beat's retention step: prune one bounded batch if the beat has time for it.

        `idle`: the turn found no more dispatch work. A busy beat still prunes one batch
        every busy_seconds, so a beat that is never idle does not let the ledger grow
        without bound. Returns True when there may be more to prune right now (the beat
        goes round again without sleeping, dispatching between batches). Database errors
        are logged and put pruning off until the next check, never raised into the loop.
        """
        if not app_settings.RETENTION_IN_BEAT:
            return False
        now = self.clock()
        if not idle and now - self.last_batch_at < self.busy_seconds:
            return False
        if not self.has_work(now):
            return False
        self.last_batch_at = now
        try:
            more = self.prune_batch(db_now())
            self.log_progress(force=not more)
            return more
        except DatabaseError as exc:
            logger.warning(
                "retention: pruning failed (%s: %s); trying again in %ss", type(exc).__name__, exc, self.check_seconds
            )
            for unit in self.units.values():
                unit.visit_at = max(unit.visit_at, now + self.check_seconds)
            self.audit_at = now + self.check_seconds
            return False

    def log_progress(self, *, force: bool) -> None:
        """Log what was pruned since the last line: at most every LOG_SECONDS, or when
        caught up (`force`), and only if something was."""
        at, then = self.logged
        now = self.clock()
        if now - at < LOG_SECONDS and not force:
            return
        pruned, audit = self.progress.pruned - then.pruned, self.progress.audit_pruned - then.audit_pruned
        calls = self.progress.calls_pruned - then.calls_pruned
        if pruned or audit or calls:
            logger.info(
                "retention: deleted %s runs, %s audit events and %s spent task calls in %.0fs "
                "(%s runs looked at, %.1fs in statements)",
                pruned,
                audit,
                calls,
                now - at,
                self.progress.examined - then.examined,
                self.progress.seconds - then.seconds,
            )
        self.logged = (now, replace(self.progress))

    def has_work(self, now: float) -> bool:
        """Whether a batch may find something: a walk or the audit due, or the policies to
        read again. No database query."""
        if self.loaded_at is None or now >= self.loaded_at + self.check_seconds:
            return True
        return self.audit_at <= now or any(unit.visit_at <= now for unit in self.units.values())

    # -- one batch --

    def prune_batch(self, now: datetime) -> bool:
        """Look at up to batch_size runs of the walks that are due and delete those the
        policy lets go (count them, in a dry run); once no walk is due, prune a batch of old
        audit events. `now` is the database's clock. Returns True when more may be due now."""
        clock = self.clock()
        self.refresh(clock)
        due = sorted(
            (unit for unit in self.units.values() if unit.visit_at <= clock),
            key=lambda u: (u.visit_at, hash((u.ident, self.order))),
        )
        if due:
            kind = due[0].kind
            self.prune_units([unit for unit in due if unit.kind == kind][:MAX_UNITS], now)
        elif self.audit_at <= clock:
            self.prune_audit(now)
        clock = self.clock()
        return self.audit_at <= clock or any(unit.visit_at <= clock for unit in self.units.values())

    def prune_units(self, units: list[Unit], now: datetime) -> None:
        started = time.monotonic()
        if self.portable:
            rows = walk_portable(units, now, limit=self.batch_size, dry_run=self.dry_run)
        else:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(BATCH_SETTINGS)
                cursor.execute(*batch_statement(units, now, limit=self.batch_size, dry_run=self.dry_run))
                rows = cursor.fetchall()
        examined = sum(row[1] for row in rows)
        self.progress.batches += 1
        self.progress.examined += examined
        self.progress.doomed += sum(row[2] for row in rows)
        self.progress.pruned += rows[0][5] if rows else 0
        self.progress.seconds += time.monotonic() - started
        self.advance(units, rows, share=share_of(units, self.batch_size))

    def advance(self, units: list[Unit], rows: list[tuple], *, share: int) -> None:
        """Move each unit's walk past what this batch looked at. A unit that looked at its
        whole share may have more: it stays due. The others are done until the next check."""
        seen = {position: (last_at, last_id) for position, _, _, last_at, last_id, _ in rows}
        looked = {position: count for position, count, *_ in rows}
        clock = self.clock()
        for position, unit in enumerate(units, start=1):
            if position in seen:
                unit.after = seen[position]
            if looked.get(position, 0) >= share:
                unit.visit_at = clock  # not finished: due again, behind the units waiting longer
            else:
                unit.visit_at = clock + self.check_seconds

    def prune_audit(self, now: datetime) -> None:
        """A batch of old audit events about runs, and of spent django.tasks calls' jobs
        (ledger/spentcalls.py; in a dry run both are counted all at once)."""
        clock = self.clock()
        calls = prune_spent_calls(self.batch_size, tenant_id=self.tenant_id, dry_run=self.dry_run)
        self.progress.calls_pruned += calls
        days = app_settings.RETENTION_AUDIT_DAYS
        deleted = 0
        if days:
            params = {"cutoff": now - timedelta(days=days), "limit": self.batch_size}
            tenant = ""
            if self.tenant_id is not None:
                tenant, params["tenant"] = "AND tenant_id = %(tenant)s", self.tenant_id
            lock = "FOR UPDATE SKIP LOCKED" if connection.features.has_select_for_update_skip_locked else ""
            params["cutoff"] = connection.ops.adapt_datetimefield_value(params["cutoff"])
            with connection.cursor() as cursor:
                if self.dry_run:
                    cursor.execute(COUNT_AUDIT.format(tenant=tenant), params)
                    self.progress.audit_pruned += cursor.fetchone()[0]
                else:
                    cursor.execute(PRUNE_AUDIT.format(tenant=tenant, lock=lock), params)
                    deleted = cursor.rowcount
                    self.progress.audit_pruned += deleted
        if self.dry_run:
            self.audit_at = float("inf")  # counted all at once
        else:
            self.audit_at = clock if max(deleted, calls) >= self.batch_size else clock + self.check_seconds

    # -- the walks --

    def refresh(self, clock: float) -> None:
        """Read the policies again (every check_seconds) and start every walk from the
        oldest run again (every rescan_seconds). A walk whose rules changed starts again at
        once; one whose rules did not keeps its place."""
        if self.rescan_at is None or clock >= self.rescan_at:
            self.units = {}
            self.rescan_at = clock + self.rescan_seconds
            self.loaded_at = None
        if self.loaded_at is not None and clock < self.loaded_at + self.check_seconds:
            return
        fresh = {unit.ident: unit for unit in self.load_units()}
        for ident, unit in fresh.items():
            old = self.units.get(ident)
            if old is not None and old.same_rules(unit):
                fresh[ident] = old
        self.units = fresh
        self.loaded_at = clock

    def load_units(self) -> list[Unit]:
        tenants = Tenant.objects.order_by("id")
        jobs = Job.objects.filter(JOB_RETENTION_SET).order_by("id")
        if self.tenant_id is not None:
            tenants, jobs = tenants.filter(id=self.tenant_id), jobs.filter(tenant_id=self.tenant_id)
        tenant_rows = [(row[0], dict(zip(FIELDS, row[1:]))) for row in tenants.values_list("id", *FIELDS)]
        job_rows = [
            (row[0], row[1], dict(zip(FIELDS, row[2:]))) for row in jobs.values_list("id", "tenant_id", *FIELDS)
        ]
        return units_for(tenant_rows, job_rows, dict(tenant_rows))


def prune_everything(
    pruner: Pruner,
    *,
    report: Callable[[Progress], None] | None = None,
    every: float = 1.0,
    now: Callable[[], datetime] = db_now,
) -> Progress:
    """Prune batch after batch until nothing is due (with once_through(): every walk once
    to its end, then the audit trail). `report` is called about every `every` seconds and
    at the end; `now` is the clock the cutoffs count from (the database's)."""
    last_report = time.monotonic()
    while True:
        more = pruner.prune_batch(now())
        if report is not None and time.monotonic() - last_report >= every:
            report(pruner.progress)
            last_report = time.monotonic()
        if not more:
            break
    if report is not None:
        report(pruner.progress)
    return pruner.progress


def once_through(**options) -> Pruner:
    """A Pruner for one pass: a walk that reached its end is not looked at again, nor are
    the policies read again, nor the walks started over."""
    return Pruner(check_seconds=float("inf"), rescan_seconds=float("inf"), **options)
