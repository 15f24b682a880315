"""Run statistics for one tenant over a recent window: runs by state, lags, failure rate.

Every query reads only the runs scheduled inside the window, through
jobrun_tenant_recent_idx (tenant, -scheduled_at): a tenant's history beyond the window
costs nothing. Lags are measured on scheduled runs only (a manual run is scheduled at the
moment it is queued; a backfilled one hours after its fire time).

- dispatch lag: coalesce(dispatched_at, enqueued_at) - scheduled_at (how late a fire
  reached the broker);
- start lag: started_at - scheduled_at (how late a worker started it);
- failure rate: (failed + dead) / (succeeded + failed + dead), None when none finished.

Percentiles are PostgreSQL's percentile_cont. Elsewhere (SQLite) they are computed in
Python, the same interpolation, over the newest SAMPLE_SIZE runs of the window.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count

from scheduler_app.models import JobRun, RunState, Trigger

# The lags, defined once: in SQL for the ledger (here, `manage.py status`) and in Python for
# the worker's and the beat's metrics (metrics.py), so the API, the command and Prometheus agree.
DISPATCH_LAG_SQL = "extract(epoch FROM coalesce(dispatched_at, enqueued_at) - scheduled_at)"
# A retry (or a replay, a manual run, a backfill) starts counting when it was queued, so its
# backoff (or its age) is not lag; only a scheduled fire's first attempt counts from its fire time.
START_LAG_SQL = ("extract(epoch FROM started_at - CASE WHEN attempt = 1 AND trigger = 'schedule' "
                 "THEN scheduled_at ELSE coalesce(enqueued_at, scheduled_at) END)")


def dispatch_lag(scheduled_at: datetime, dispatched_at: datetime) -> float:
    """Seconds from a fire time to its run's first trip to the broker (DISPATCH_LAG_SQL)."""
    return (dispatched_at - scheduled_at).total_seconds()


def start_lag(*, attempt: int, trigger: str, scheduled_at: datetime, enqueued_at: datetime | None,
              started_at: datetime) -> float:
    """Seconds a run waited for a worker (START_LAG_SQL): from its fire time for a scheduled
    fire's first attempt, else from when it was queued."""
    since = scheduled_at if attempt == 1 and trigger == Trigger.SCHEDULE else (enqueued_at or scheduled_at)
    return (started_at - since).total_seconds()


PERCENTILES = (0.5, 0.95, 0.99)
SAMPLE_SIZE = 10_000
FINISHED = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD)
FAILED = (RunState.FAILED, RunState.DEAD)

LAGS_SQL = """
SELECT percentile_cont(%(percentiles)s::float8[]) WITHIN GROUP (
           ORDER BY extract(epoch FROM coalesce(dispatched_at, enqueued_at) - scheduled_at)),
       count(coalesce(dispatched_at, enqueued_at)),
       percentile_cont(%(percentiles)s::float8[]) WITHIN GROUP (
           ORDER BY extract(epoch FROM started_at - scheduled_at)),
       count(started_at)
  FROM scheduler_app_jobrun
 WHERE tenant_id = %(tenant_id)s
   AND scheduled_at > %(since)s AND scheduled_at <= %(until)s
   AND trigger = %(trigger)s
"""


def run_stats(tenant_id: int, *, window: timedelta, now: datetime) -> dict:
    since = now - window
    runs = JobRun.objects.filter(tenant_id=tenant_id, scheduled_at__gt=since, scheduled_at__lte=now)
    found = dict(runs.order_by().values_list("state").annotate(n=Count("id")))
    counts = {state: found.get(state, 0) for state in RunState.values}
    finished = sum(counts[state] for state in FINISHED)
    if connection.vendor == "postgresql":
        dispatch_lag, start_lag = lags_from_database(tenant_id, since, now)
    else:
        dispatch_lag, start_lag = lags_from_sample(runs)
    return {
        "since": since,
        "until": now,
        "counts": counts,
        "total": sum(counts.values()),
        "dispatch_lag_seconds": dispatch_lag,
        "start_lag_seconds": start_lag,
        "failure_rate": sum(counts[state] for state in FAILED) / finished if finished else None,
    }


def lags_from_database(tenant_id: int, since: datetime, until: datetime) -> tuple[dict, dict]:
    with connection.cursor() as cursor:
        cursor.execute(LAGS_SQL, {"percentiles": list(PERCENTILES), "tenant_id": tenant_id, "since": since,
                                  "until": until, "trigger": Trigger.SCHEDULE.value})
        dispatch, dispatch_count, start, start_count = cursor.fetchone()
    return summary(dispatch, dispatch_count), summary(start, start_count)


def lags_from_sample(runs) -> tuple[dict, dict]:
    rows = runs.filter(trigger=Trigger.SCHEDULE).order_by("-scheduled_at").values_list(
        "scheduled_at", "dispatched_at", "enqueued_at", "started_at")[:SAMPLE_SIZE]
    dispatch, start = [], []
    for scheduled_at, dispatched_at, enqueued_at, started_at in rows:
        if (reached := dispatched_at or enqueued_at) is not None:
            dispatch.append((reached - scheduled_at).total_seconds())
        if started_at is not None:
            start.append((started_at - scheduled_at).total_seconds())
    return summary(percentiles(dispatch), len(dispatch)), summary(percentiles(start), len(start))


def percentiles(values: list[float]) -> list[float] | None:
    """PostgreSQL's percentile_cont at PERCENTILES: linear interpolation between the two
    nearest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    found = []
    for fraction in PERCENTILES:
        position = fraction * (len(ordered) - 1)
        low, high = math.floor(position), math.ceil(position)
        found.append(ordered[low] + (ordered[high] - ordered[low]) * (position - low))
    return found


def summary(values: list[float] | None, count: int) -> dict:
    if values is None:
        return {"count": count, "p50": None, "p95": None, "p99": None}
    return {"count": count, **{f"p{round(p * 100)}": float(value) for p, value in zip(PERCENTILES, values)}}
