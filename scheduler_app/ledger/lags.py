"""The lags, defined once, and the clause that picks one tenant's runs or all: the
statistics (stats.py), the hourly rollup (rollup.py), `manage.py status` and the metrics
all read them from here, so the API, the command and Prometheus agree."""

from __future__ import annotations

from datetime import datetime

from scheduler_app.models import RunState, Trigger

# In SQL for the ledger, in Python for the worker's and the beat's metrics (metrics.py).
DISPATCH_LAG_SQL = "extract(epoch FROM coalesce(dispatched_at, enqueued_at) - scheduled_at)"
# A retry (or a replay, a manual run, a backfill) starts counting when it was queued, so its
# backoff (or its age) is not lag; only a scheduled fire's first attempt counts from its fire time.
START_LAG_SQL = (
    "extract(epoch FROM started_at - CASE WHEN attempt = 1 AND trigger = 'schedule' "
    "THEN scheduled_at ELSE coalesce(enqueued_at, scheduled_at) END)"
)


def dispatch_lag(scheduled_at: datetime, dispatched_at: datetime) -> float:
    """Seconds from a fire time to its run's first trip to the broker (DISPATCH_LAG_SQL)."""
    return (dispatched_at - scheduled_at).total_seconds()


def start_lag(
    *, attempt: int, trigger: str, scheduled_at: datetime, enqueued_at: datetime | None, started_at: datetime
) -> float:
    """Seconds a run waited for a worker (START_LAG_SQL): from its fire time for a scheduled
    fire's first attempt, else from when it was queued."""
    since = scheduled_at if attempt == 1 and trigger == Trigger.SCHEDULE else (enqueued_at or scheduled_at)
    return (started_at - since).total_seconds()


def run_start_lag(run) -> float | None:
    """start_lag of a run row (the admin's job and run pages), None until it started."""
    if run.started_at is None:
        return None
    return start_lag(
        attempt=run.attempt,
        trigger=run.trigger,
        scheduled_at=run.scheduled_at,
        enqueued_at=run.enqueued_at,
        started_at=run.started_at,
    )


ONE_TENANT = "tenant_id = %(tenant_id)s"
# Every state: the planner then walks jobrun_state_recent_idx once per state, over the window.
ALL_TENANTS = "state = ANY(%(states)s)"


def scope(tenant_id: int | None) -> tuple[str, dict]:
    """The WHERE clause choosing one tenant's runs or all, and its parameters."""
    if tenant_id is None:
        return ALL_TENANTS, {"states": list(RunState.values)}
    return ONE_TENANT, {"tenant_id": tenant_id}
