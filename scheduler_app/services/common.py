"""What the services share: the quota error, whole-number checks, a unique rule's violation
told from other errors, named advisory locks, and the dispatch-quota admission of runs
recorded outside a beat. (The audit row of a job's change is models/lifecycle.py's
audit_job; waking the beats dispatch/waker.py's wake_beats.)"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import IntegrityError, connection, models

from scheduler_app.conf import app_settings
from scheduler_app.dispatch import run_times, tenant_budget
from scheduler_app.dispatch.quotas import manual_admission
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import AuditEvent, RunState, TargetKind, Tenant
from scheduler_app.validation import InvalidInput


class QuotaExceeded(InvalidInput):
    """The input is well-formed but the tenant's quota refuses it."""


def check_int(field: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be a whole number")
    if not low <= value <= high:
        raise InvalidInput(field, f"must be between {low} and {high}")
    return value


def violates(exc: IntegrityError, model: type[models.Model], *constraints: str) -> bool:
    """Whether `exc` broke one of `model`'s unique `constraints` (by its name on PostgreSQL, by
    its columns in SQLite's message), and not another rule: a NOT NULL or a foreign key broken
    is a different error, which callers let through rather than report as a name taken."""
    diag = getattr(exc.__cause__, "diag", None)
    if diag is not None:
        return diag.constraint_name in constraints
    table = model._meta.db_table
    for unique in (c for c in model._meta.constraints if c.name in constraints):
        columns = ", ".join(f"{table}.{model._meta.get_field(name).column}" for name in unique.fields)
        if f"UNIQUE constraint failed: {columns}" in str(exc):
            return True
    return False


def lock_names(keys: Iterable[str]) -> None:
    """Take a PostgreSQL transaction advisory lock on each of `keys`, in the order given, until
    the caller's transaction ends: nothing but another such lock waits on them (no row is
    locked). Callers give keys in one agreed order, so that no two lockers wait on each other.
    Other databases go without (SQLite has one writer at a time)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for key in keys:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])


def refuse_monitored(job, action: str) -> None:
    """InvalidInput naming `target` when `job` is monitored: it runs elsewhere and checks in
    (docs/check-ins.md), so a run Cronfleet recorded for it (trigger, replay, backfill) would
    only end failed. `action` is what was asked ('triggered', 'replayed', 'backfilled')."""
    if job.target_kind == TargetKind.MONITOR:
        raise InvalidInput(
            "target",
            f"a monitored job runs elsewhere and checks in; it cannot be {action} here (its runs come from its pings)",
        )


def admitted(tenant_id: int, now: datetime, count: int) -> tuple[int, str]:
    """How many of `count` runs recorded now may go to the broker at once under the tenant's
    dispatch quota, and the reason to record on the others (they wait as pending; the beat
    queues them as the budget frees). Locks the tenant row: call inside the transaction
    that records the runs."""
    budget = tenant_budget(tenant_id, now)
    if budget is None:
        return count, ""
    return min(count, budget.for_new_runs), budget.reason


def admitted_manual(tenant_id: int, now: datetime, count: int) -> tuple[int, str]:
    """admitted() for manual runs (triggers, backfills): within the tenant's manual budget
    (CRONFLEET_MANUAL_RUNS_IN_FLIGHT) and its quota, and none while its older manual runs
    wait. The others wait as pending and the beats, woken at commit, release them fairly."""
    go, reason = manual_admission(tenant_id, now, count)
    if go < count:
        wake_beats()
    return go, reason


MANUAL_RUN_WINDOW = timedelta(hours=1)
# The audit rows that record manual runs: one run each, or a backfill's `created` runs.
MANUAL_RUN_ACTIONS = ("job.triggered", "run.replayed", "job.backfilled")


def check_manual_runs_per_hour(tenant_id: int, now: datetime, count: int) -> None:
    """Refuse `count` more manual runs (triggers, replays, backfilled fires) when the tenant
    recorded its bound of them in the hour before `now`: its manual_runs_per_hour, else
    CRONFLEET_MANUAL_RUNS_PER_HOUR (0: no bound).

    Counted from the audit trail (audit_tenant_recent_idx), not the ledger: a replay writes
    no new run, a backfill's runs carry past fire times, and deleting a job deletes its runs
    but keeps its audit rows, so deleting and recreating a job does not reset the count.
    Locks the tenant's row (read with its bound in one statement): call it inside the
    transaction that records the runs.
    """
    slug, own = (
        Tenant.objects.select_for_update(no_key=True)
        .filter(id=tenant_id)
        .values_list("slug", "manual_runs_per_hour")
        .get()
    )
    limit = app_settings.MANUAL_RUNS_PER_HOUR if own is None else own
    if not limit:
        return
    recorded = AuditEvent.objects.filter(
        tenant_id=tenant_id, created_at__gt=now - MANUAL_RUN_WINDOW, action__in=MANUAL_RUN_ACTIONS
    ).values_list("action", "detail__created")
    used = sum(int(created or 0) if action == "job.backfilled" else 1 for action, created in recorded)
    if used + count > limit:
        source = "CRONFLEET_MANUAL_RUNS_PER_HOUR" if own is None else "the tenant's manual_runs_per_hour"
        raise QuotaExceeded(
            "tenant",
            f"tenant {slug!r} recorded {used} manual runs (triggers, replays, backfilled fires) in the "
            f"last hour; {count} more would pass its bound of {limit} per hour ({source}); nothing was recorded",
        )


def admission_fields(go: int, reason: str, now: datetime) -> dict:
    """The columns of a run that goes to the broker now (`go` true: a bool, or admitted()'s
    count of one), or waits for its tenant's quota (its times as the beat records them:
    dispatch.run_times)."""
    state = RunState.QUEUED if go else RunState.PENDING
    _, enqueued_at, dispatched_at, _ = run_times(state, now)
    fields = {"state": state, "enqueued_at": enqueued_at, "dispatched_at": dispatched_at}
    return fields if go else {**fields, "reason": reason}


def jsonable(value):
    return value.isoformat() if isinstance(value, datetime) else value
