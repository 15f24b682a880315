"""What the services share: the quota error, whole-number checks, and the dispatch-quota
admission of runs recorded outside a beat. (The audit row of a job's change is
models/lifecycle.py's audit_job; waking the beats dispatch/waker.py's wake_beats.)"""

from __future__ import annotations

from datetime import datetime

from scheduler_app.dispatch import run_times, tenant_budget
from scheduler_app.dispatch.quotas import manual_admission
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import RunState, TargetKind
from scheduler_app.validation import InvalidInput


class QuotaExceeded(InvalidInput):
    """The input is well-formed but the tenant's quota refuses it."""


def check_int(field: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be a whole number")
    if not low <= value <= high:
        raise InvalidInput(field, f"must be between {low} and {high}")
    return value


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
