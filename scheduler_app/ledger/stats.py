"""Run statistics over a recent window, for one tenant or all: runs by state, lags,
failure rate, the failing jobs. The lags are defined once, in lags.py: the stats API, `manage.py status` and the metrics
(metrics.py, through dispatch_lag and start_lag) all use them.

- dispatch lag: coalesce(dispatched_at, enqueued_at) - scheduled_at (how late a fire
  reached the broker);
- start lag: how long a run waited for a worker: started_at - scheduled_at for a scheduled
  fire's first attempt; started_at - enqueued_at for anything else (a retry, so its backoff
  is not lag; a replay);
- failure rate: (failed + dead) / (succeeded + failed + dead), None when none finished.

Lags are measured on scheduled runs only (a manual run is scheduled at the moment it is
queued; a backfilled one hours after its fire time).

Every query reads only the runs scheduled inside the window: for one tenant through
jobrun_tenant_recent_idx (tenant, -scheduled_at); for all tenants through
jobrun_state_recent_idx (state, -scheduled_at), by naming every state (ALL_TENANTS), since
no index starts with scheduled_at. The ledger's history beyond the window costs nothing.

Percentiles are PostgreSQL's percentile_cont. Elsewhere (SQLite) they are computed in
Python, the same interpolation, over the newest SAMPLE_SIZE runs of the window.

Windows wider than EXACT_WINDOW (PostgreSQL) are read through the hourly rollup
(rollup.py): the hours rolled up inside the window from it, the edges and the hours not
yet rolled up from the ledger. Their counts are as of each hour's roll-up (SETTLE after its
end) and survive pruning; their lag percentiles come from log-scale histograms, within
4.4 % of the exact figure for lags between 1 ms and 8 days (0 below 1 ms), nearest rank.
A 7-day window then reads at most 168 rollup rows and about two hours of runs.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count

from scheduler_app.ledger import rollup
from scheduler_app.ledger.lags import DISPATCH_LAG_SQL, START_LAG_SQL, dispatch_lag, scope, start_lag
from scheduler_app.models import JobRun, RunState, Trigger

PERCENTILES = (0.5, 0.95, 0.99)
SAMPLE_SIZE = 10_000
EXACT_WINDOW = timedelta(hours=1)  # wider windows read the hourly rollup (rollup.py)
FINISHED = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD)
FAILED = (RunState.FAILED, RunState.DEAD)

LAGS_SQL = f"""
SELECT percentile_cont(%(percentiles)s::float8[]) WITHIN GROUP (ORDER BY {DISPATCH_LAG_SQL}),
       count(coalesce(dispatched_at, enqueued_at)),
       percentile_cont(%(percentiles)s::float8[]) WITHIN GROUP (ORDER BY {START_LAG_SQL}),
       count(started_at)
  FROM scheduler_app_jobrun
 WHERE {{scope}}
   AND scheduled_at > %(since)s AND scheduled_at <= %(until)s
   AND trigger = %(trigger)s
"""
# The jobs with the most failed and dead runs scheduled in the window, and the last error of each.
FAILING_JOBS_SQL = """
WITH failing AS (
    SELECT job_id, count(*) FILTER (WHERE state = 'failed') AS failed, count(*) FILTER (WHERE state = 'dead') AS dead,
           max(scheduled_at) AS last_at
      FROM scheduler_app_jobrun
     WHERE state IN ('failed', 'dead') AND {scope}
       AND scheduled_at > %(since)s AND scheduled_at <= %(until)s
     GROUP BY job_id
     ORDER BY count(*) DESC, max(scheduled_at) DESC
     LIMIT %(limit)s
)
SELECT tenant.slug, job.name, failing.failed, failing.dead, failing.last_at,
       (SELECT substr(run.error, 1, 300) FROM scheduler_app_jobrun AS run
         WHERE run.job_id = failing.job_id AND run.scheduled_at = failing.last_at)
  FROM failing
  JOIN scheduler_app_job AS job ON job.id = failing.job_id
  JOIN scheduler_app_tenant AS tenant ON tenant.id = job.tenant_id
 ORDER BY failing.failed + failing.dead DESC, failing.last_at DESC
"""


def run_stats(tenant_id: int | None, *, window: timedelta, now: datetime) -> dict:
    """Runs scheduled in the `window` before `now`, of one tenant or (None) of all."""
    since = now - window
    if connection.vendor == "postgresql" and window > EXACT_WINDOW:
        return from_rollup(tenant_id, since, now)
    runs = runs_between(tenant_id, since, now)
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


def from_rollup(tenant_id: int | None, since: datetime, now: datetime) -> dict:
    """run_stats over a wide window: the hourly rollup plus the live edges (rollup.py)."""
    tally = rollup.window_stats(tenant_id, since, now)
    counts = {state: tally.counts.get(state, 0) for state in RunState.values}
    finished = sum(counts[state] for state in FINISHED)
    return {
        "since": since,
        "until": now,
        "counts": counts,
        "total": sum(counts.values()),
        "dispatch_lag_seconds": summary(rollup.hist_percentiles(tally.dispatch, PERCENTILES), sum(tally.dispatch)),
        "start_lag_seconds": summary(rollup.hist_percentiles(tally.start, PERCENTILES), sum(tally.start)),
        "failure_rate": sum(counts[state] for state in FAILED) / finished if finished else None,
    }


def runs_between(tenant_id: int | None, since: datetime, until: datetime):
    runs = JobRun.objects.filter(scheduled_at__gt=since, scheduled_at__lte=until)
    return runs.filter(tenant_id=tenant_id) if tenant_id is not None else runs.filter(state__in=RunState.values)


def lags_from_database(tenant_id: int | None, since: datetime, until: datetime) -> tuple[dict, dict]:
    clause, params = scope(tenant_id)
    with connection.cursor() as cursor:
        cursor.execute(
            LAGS_SQL.format(scope=clause),
            {
                "percentiles": list(PERCENTILES),
                "since": since,
                "until": until,
                "trigger": Trigger.SCHEDULE.value,
                **params,
            },
        )
        dispatch, dispatch_count, start, start_count = cursor.fetchone()
    return summary(dispatch, dispatch_count), summary(start, start_count)


def lags_from_sample(runs) -> tuple[dict, dict]:
    rows = (
        runs.filter(trigger=Trigger.SCHEDULE)
        .order_by("-scheduled_at")
        .values_list("scheduled_at", "dispatched_at", "enqueued_at", "started_at", "attempt", "trigger")[:SAMPLE_SIZE]
    )
    dispatch, start = [], []
    for scheduled_at, dispatched_at, enqueued_at, started_at, attempt, trigger in rows:
        if (reached := dispatched_at or enqueued_at) is not None:
            dispatch.append(dispatch_lag(scheduled_at, reached))
        if started_at is not None:
            start.append(
                start_lag(
                    attempt=attempt,
                    trigger=trigger,
                    scheduled_at=scheduled_at,
                    enqueued_at=enqueued_at,
                    started_at=started_at,
                )
            )
    return summary(percentiles(dispatch), len(dispatch)), summary(percentiles(start), len(start))


def failing_jobs(tenant_id: int | None, *, window: timedelta, now: datetime, limit: int = 10) -> list[dict]:
    """The jobs with the most failed and dead runs scheduled in the window (PostgreSQL and
    SQLite alike), most first, with the last error of each."""
    clause, params = scope(tenant_id)
    if connection.vendor != "postgresql":  # no = ANY(array) there: the tenant scope or none at all
        clause, params = (clause, params) if tenant_id is not None else ("1 = 1", {})
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(
            FAILING_JOBS_SQL.format(scope=clause),
            {"since": adapt(now - window), "until": adapt(now), "limit": limit, **params},
        )
        rows = cursor.fetchall()
    if connection.vendor == "sqlite":  # datetimes come back as text there
        convert = connection.ops.convert_datetimefield_value
        rows = [(*row[:4], convert(row[4], None, connection), row[5]) for row in rows]
    return [
        {"job": f"{slug}/{name}", "failed": failed, "dead": dead, "last_at": last_at, "last_error": error or ""}
        for slug, name, failed, dead, last_at, error in rows
    ]


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
