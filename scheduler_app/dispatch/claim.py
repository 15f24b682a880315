"""Claim due jobs: lock a batch, fairly across tenants (FAIR_CLAIM), or from one ranking of
a backlog (FairOrder and CLAIM_LISTED on PostgreSQL)."""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import connection

from scheduler_app.dispatch import sql
from scheduler_app.dispatch.common import _local

# The columns a beat needs to plan and publish a job's fires; nothing else is read.
CLAIM_FIELDS = (
    "id",
    "tenant_id",
    "version",
    "cron",
    "timezone",
    "every_seconds",
    "run_at",
    "anchor_at",
    "start_at",
    "end_at",
    "next_run_at",
    "misfire_policy",
    "catchup_window_seconds",
    "run_all_cap",
    "queue",
    "timeout_seconds",
    "priority",
    "overlap_policy",
    "jitter_seconds",
    "jitter_seed",
    "batch",
    "target_kind",
    "name",
    "calendar_id",
    "calendar_policy",
)


def claim_due_jobs(now: datetime, *, limit: int, held_back: Sequence[str] = ()) -> list[dict]:
    """Lock up to `limit` due jobs for this transaction, fairly across tenants, skipping
    rows another beat holds and jobs of the broker queues in `held_back`.

    NO KEY UPDATE is enough to stop other beats and does not block inserts that
    reference the job (its runs, audit events) from other connections. While a backlog
    lasts, PostgreSQL claims from one ranking of the next batches (FairOrder).
    """
    if connection.vendor == "postgresql":
        # The ranking's estimates (a LIMIT per tenant and level it cannot know) put it over
        # jit_above_cost: compiling took ~45 ms of a 110 ms claim at 1,000 rows. For this
        # transaction only.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")
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
    statement = sql.FAIR_CLAIM_PG if connection.vendor == "postgresql" else sql.FAIR_CLAIM_SQLITE
    return statement.format(
        columns=CLAIM_COLUMNS, job=claim_job_clause(), lock=claim_lock_clause(), held_back=held_back
    )


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


def job_dicts(rows: list[tuple] | list[list]) -> list[dict]:
    """Claimed rows as dicts of CLAIM_FIELDS; SQLite returns datetimes as text."""
    if connection.vendor == "sqlite" and rows:
        convert = connection.ops.convert_datetimefield_value
        rows = [list(row) for row in rows]
        for row in rows:
            for i in _CLAIM_DATETIMES:
                row[i] = convert(row[i], None, connection)
    return [dict(zip(CLAIM_FIELDS, row, strict=True)) for row in rows]


# Batches listed by one ranking while a backlog lasts. The ranking costs about what it lists
# (sql._FAIR_RANKING_PG), so a list longer than what beats claim within its lifetime is
# waste: at 1,000,000 due, 100 batches (0.6 s a ranking) were ranked again after 4 claims.
FAIR_ORDER_BATCHES = 10
FAIR_ORDER_SECONDS = 2.0  # how long one ranking is claimed from (database time), at least
FAIR_ORDER_COST_FACTOR = 4  # ... and at least this many times what ranking took


class FairOrder:
    """One ranking of a large due set, claimed from for a while (PostgreSQL, per thread).

    Ranking reads and sorts about as many due jobs as it lists (sql._FAIR_RANKING_PG; it
    used to read all of them: 2.1-2.3 s at 1,000,000 due), and a ranking per batch still
    costs a statement with its probes per tenant and sorts. So after a claim finds a full
    batch (a backlog), the next claim ranks
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
        # With ids, made_at is set: the refresh that listed them set it (unless it failed part way).
        return bool(self.ids) and self.made_at <= now < self.made_at + self.lifetime  # type: ignore[operator]

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
                window = self.ids[: 2 * limit].tolist()  # room to skip what other beats took meanwhile
                cursor.execute(
                    claim_listed_sql(clause), {"ids": window, "now": now, "limit": limit - len(jobs), **params}
                )
                rows = cursor.fetchall()
                got = len(rows)
                passed = rows[-1][0] if got == limit - len(jobs) else len(window)
                del self.ids[:passed]  # skipped ones are another beat's (or no longer due)
                jobs += job_dicts([row[1:] for row in rows])
        return jobs

    def forget(self) -> None:
        self.ids, self.made_at, self.backlog = array("q"), None, False


def _fair_order() -> FairOrder:
    """This thread's FairOrder (a beat is one thread; tests run beats as threads)."""
    if not hasattr(_local, "fair_order"):
        _local.fair_order = FairOrder()
    return _local.fair_order


def forget_fair_order() -> None:
    """Drop this thread's cached ranking (tests that must start from a fresh claim)."""
    _fair_order().forget()
