"""Tenant dispatch quotas: budgets under the tenant's row lock, fires over the budget held
as `pending`, and their release as the budget frees.

Manual runs (triggers and backfills) have a budget even without a quota: at most
CRONFLEET_MANUAL_RUNS_IN_FLIGHT of a tenant's manual runs queued or running at once. The rest
wait as pending (MANUAL_REASON) and the beat releases them here as the tenant's own runs
finish, so one tenant's backfill cannot bury the other tenants' fires at the workers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.transaction import TransactionManagementError

from scheduler_app.conf import app_settings
from scheduler_app.dispatch import sql
from scheduler_app.dispatch.common import (
    CONCURRENCY_REASON,
    FIRES_REASON,
    lock_clause,
    messages_for,
    one_pass,
    tenant_lock_clause,
)
from scheduler_app.dispatch.plan import RunRow
from scheduler_app.dispatch.publish import RunMessage
from scheduler_app.models import JobRun, RunState, Tenant, Trigger

QUOTA_WINDOW = timedelta(seconds=60)  # max_fires_per_minute counts runs first dispatched in this window
QUOTA_POLL_SECONDS = 1.0  # longest beat sleep while runs wait for a quota (a finished run frees a slot unannounced)
TENANT_CHUNK = 100  # quota tenants locked per release transaction
MANUAL_PREFIX = "quota_manual"  # a "quota_" reason: held runs count as their job's next run, as a quota's do
MANUAL_REASON = MANUAL_PREFIX + ": waiting for room under the tenant's budget of {} manual runs in flight"
MANUAL_TRIGGERS = (Trigger.MANUAL, Trigger.BACKFILL)


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


def budget_of(
    max_fires_per_minute: int | None,
    max_concurrent_runs: int | None,
    *,
    fired: int,
    in_flight: int,
    holding: bool = False,
) -> Budget | None:
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


def lock_tenants(tenant_ids: Iterable[int]) -> None:
    """Lock tenant rows in id order (FOR NO KEY UPDATE: runs referencing them can still be
    inserted) until the caller's transaction ends; a no-op on SQLite."""
    list(
        Tenant.objects.select_for_update(no_key=True)
        .filter(id__in=set(tenant_ids))
        .order_by("id")
        .values_list("id", flat=True)
    )


def manual_in_flight_room(tenant_id: int) -> int:
    """How many more of the tenant's manual runs may be queued or running now
    (jobrun_tenant_in_flight_idx, then each such run's trigger). Call it under the tenant's row lock."""
    in_flight = JobRun.objects.filter(
        tenant_id=tenant_id, state__in=(RunState.QUEUED, RunState.RUNNING), trigger__in=MANUAL_TRIGGERS
    ).count()
    return max(0, app_settings.MANUAL_RUNS_IN_FLIGHT - in_flight)


def manual_admission(tenant_id: int, now: datetime, count: int) -> tuple[int, str]:
    """How many of `count` manual runs recorded now may go to the broker at once, and the
    reason to record on the others, naming the binding limit (pending; the beat releases them
    in turn): none while the tenant's older manual runs wait, else the room under the manual
    budget and the quota.

    Locks the tenant's row: call it inside the transaction that records the runs, so two
    triggers of one tenant never both spend the same room.
    """
    if not connection.in_atomic_block:
        raise TransactionManagementError("manual_admission locks the tenant row: call it inside transaction.atomic()")
    lock_tenants([tenant_id])
    reason = MANUAL_REASON.format(app_settings.MANUAL_RUNS_IN_FLIGHT)
    if JobRun.objects.filter(tenant_id=tenant_id, state=RunState.PENDING, reason__startswith=MANUAL_PREFIX).exists():
        return 0, reason  # older manual runs go first
    room = manual_in_flight_room(tenant_id)
    budget = tenant_budgets([tenant_id], now).get(tenant_id)
    if budget is not None and budget.for_new_runs < room:  # the quota binds: its reason, its release
        room, reason = budget.for_new_runs, budget.reason
    return min(count, room), reason


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
        for i in indexes[budget.for_new_runs :]:
            rows[i] = rows[i]._replace(state=RunState.PENDING.value, reason=budget.reason)
    return rows


def release_quota_held_runs(now: datetime, *, limit: int, held_back: Iterable[str] = ()) -> list[RunMessage]:
    """Queue runs held back by their tenant's quota as its budget frees, highest priority
    first, then oldest fire, at most `limit` per call; then the tenant's held manual runs,
    within the same budget and the room under its manual budget, none of a job queue in
    `held_back` (over the high-water mark: backpressure).

    Each tenant is handled under its row lock, like dispatch spending the same budget, so
    a beat releasing and a beat dispatching never both spend it. A tenant whose quota was
    removed meanwhile has its held runs queued without limit (its manual runs within the
    manual budget).
    """
    held_back = list(held_back)
    with connection.cursor() as cursor:
        cursor.execute(sql.QUOTA_HELD_TENANTS, {"limit": limit})
        tenants = [row[0] for row in cursor.fetchall()]
    released: list[tuple[int, int, int]] = []
    for start in range(0, len(tenants), TENANT_CHUNK):
        chunk = tenants[start : start + TENANT_CHUNK]
        with transaction.atomic(durable=True):
            lock_tenants(chunk)  # every tenant: its manual room is counted under the lock
            budgets = tenant_budgets(chunk, now)
            for tenant_id in chunk:
                room = limit - len(released)
                if tenant_id in budgets:
                    room = min(room, budgets[tenant_id].available)
                if room <= 0:
                    continue
                quota_held = release_held(now, tenant_id, room, manual=False)
                room = min(room - len(quota_held), manual_in_flight_room(tenant_id))
                released += quota_held
                if room > 0:
                    released += release_held(now, tenant_id, room, manual=True, held_back=held_back)
        if len(released) >= limit:
            break
    return messages_for(released)


def release_held(
    now: datetime, tenant_id: int, limit: int, *, manual: bool, held_back: list[str] | None = None
) -> list[tuple[int, int, int]]:
    """Queue up to `limit` of one tenant's held runs, its manual ones or the others waiting
    for its quota, in one statement (sql.RELEASE_QUOTA_HELD_RUNS); the (run id, attempt,
    job id) of each. The caller holds the tenant's row lock."""
    queues = {f"held_back_{number}": queue for number, queue in enumerate(held_back or ())}
    held_back_clause = (
        ""
        if not queues
        else (
            "AND held.job_id NOT IN (SELECT job.id FROM scheduler_app_job AS job WHERE job.tenant_id = %(tenant)s "
            f"AND job.queue IN ({', '.join(f'%({name})s' for name in queues)}))"
        )
    )
    statement = sql.RELEASE_QUOTA_HELD_RUNS.format(
        lock=lock_clause(),
        **one_pass(),
        manual="=" if manual else "<>",
        manual_length=len(MANUAL_PREFIX),
        held_back=held_back_clause,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            statement,
            {
                "now": connection.ops.adapt_datetimefield_value(now),
                "tenant": tenant_id,
                "limit": limit,
                "manual_prefix": MANUAL_PREFIX,
                **queues,
            },
        )
        return cursor.fetchall()
