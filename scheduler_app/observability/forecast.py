"""The next quarter hour per queue, for autoscalers (docs/autoscaling.md): fires due in the
next 1, 5 and 15 minutes, the work they bring (fires x each job's recent median run
duration) and the workers that work needs to start within a target start lag.

The fires are the dashboard's (dashboard.group_fires): the enabled jobs due within the
longest horizon, grouped by queue, schedule, calendar and first minute, each group's fires
expanded once, overdue jobs counted as due now. For a queue q, with c the concurrency of one
worker (CRONFLEET_FORECAST_WORKER_CONCURRENCY) and L the target start lag
(CRONFLEET_FORECAST_TARGET_LAG_SECONDS):

    workers(q) = max(ceil(in_flight(q) / c), ceil(burst(q) / (max(L, 1) * c)),
                     max over h in 1m, 5m, 15m of ceil(work(q, h) / ((h + L) * c)))

that is, enough slots that the work due within h is done or started by h + L, that the most
work due within any L seconds of the next 5 minutes (burst: a spike at one instant) starts
within L, and never fewer than the runs queued or running now occupy. A job's duration is the median of its last
RECENT_RUNS runs that finished (started to finished); a job with none, the mean of those
medians in its queue, else CRONFLEET_FORECAST_DEFAULT_SECONDS.

On the embedded SQLite demo the same groups are read through the ORM (read_in_python).

Read at a scrape of the web's /metrics (ForecastCollector), at most once every
CRONFLEET_FORECAST_CACHE_SECONDS per process. The cost:

- the due jobs are read through job_due_idx up to now + 15 minutes (the dashboard reads an
  hour of them);
- durations are read for the DURATION_SAMPLE jobs due soonest, RECENT_RUNS entries each of
  jobrun_one_per_fire (job_id, scheduled_at) walked backwards: never a job's whole history;
- runs in flight per queue through the partial jobrun_active_idx, at most IN_FLIGHT_CAP.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from prometheus_client.core import GaugeMetricFamily

from scheduler_app.conf import app_settings
from scheduler_app.models import Job, JobRun, RunState, db_now
from scheduler_app.observability.dashboard import group_calendars, group_fires, percentile_cont, truncate
from scheduler_app.queues import queue_name

logger = logging.getLogger(__name__)

HORIZONS = {"1m": 60, "5m": 300, "15m": 900}
RECENT_RUNS = 20  # a job's last runs read for its median duration (finished ones count)
DURATION_SAMPLE = 10_000  # jobs whose durations are read; the others take their queue's mean
# A burst (work due within one target lag) is looked for this far ahead: time enough to start
# workers before it, short enough not to keep them idle for a quarter of an hour.
BURST_HORIZON = 300
IN_FLIGHT_CAP = 100_000  # runs in flight counted at most (past it, the floor says "at least")
FINISHED_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD)  # FORECAST_SQL's state IN (...)

FORECAST_SQL = """
WITH due AS (
    SELECT id, queue, cron, timezone, every_seconds, run_at, calendar_id, calendar_policy, next_run_at
      FROM scheduler_app_job
     WHERE enabled AND next_run_at IS NOT NULL AND next_run_at < %(end)s
), timed AS (
    SELECT soonest.id, recent.median
      FROM (SELECT id FROM due ORDER BY next_run_at, id LIMIT %(sample)s) AS soonest
      CROSS JOIN LATERAL (
          SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)) AS median
            FROM (SELECT state, started_at, finished_at FROM scheduler_app_jobrun AS run
                   WHERE run.job_id = soonest.id ORDER BY run.scheduled_at DESC LIMIT %(recent)s) AS last
           WHERE state IN ('succeeded', 'failed', 'dead') AND started_at IS NOT NULL AND finished_at IS NOT NULL
      ) AS recent
)
SELECT queue, cron, timezone, every_seconds, run_at, calendar_id, calendar_policy,
       date_trunc('minute', next_run_at), count(*), coalesce(sum(timed.median), 0), count(timed.median)
  FROM due LEFT JOIN timed USING (id)
 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
"""
# The predicate implies jobrun_active_idx's, so the planner reads that partial index only.
IN_FLIGHT_SQL = """
SELECT job.queue, count(*)
  FROM (SELECT job_id FROM scheduler_app_jobrun WHERE state IN ('queued', 'running') LIMIT %(cap)s) AS run
  JOIN scheduler_app_job AS job ON job.id = run.job_id
 GROUP BY 1
"""


@dataclass
class Forecast:
    now: datetime
    fires: dict[str, dict[str, int]] = field(default_factory=dict)  # queue -> horizon -> fires
    work: dict[str, dict[str, float]] = field(default_factory=dict)  # queue -> horizon -> seconds
    in_flight: dict[str, int] = field(default_factory=dict)  # queue -> runs queued or running
    workers: dict[str, int] = field(default_factory=dict)  # queue -> recommended workers
    burst: dict[str, float] = field(default_factory=dict)  # queue -> most work due in one lag, next 5 min


def compute(now: datetime, read: Callable[[datetime], tuple[list[tuple], dict[str, int]]] | None = None) -> Forecast:
    """The forecast at `now`. Raises DatabaseError when the database does not answer."""
    read = read or (read_in_sql if connection.vendor == "postgresql" else read_in_python)
    rows, in_flight = read(now + timedelta(seconds=max(HORIZONS.values())))
    found = Forecast(now=now, in_flight=in_flight)
    add_fires(found, rows, group_calendars([row[1:] for row in rows], now))
    found.workers = {
        queue: recommended_workers(
            found.work.get(queue, {}), found.in_flight.get(queue, 0), found.burst.get(queue, 0.0)
        )
        for queue in sorted({*found.fires, *found.in_flight})
    }
    return found


def read_in_sql(end: datetime) -> tuple[list[tuple], dict[str, int]]:
    """FORECAST_SQL's groups (queue, schedule, calendar, first minute, jobs, the sum and count
    of the known medians) and the runs in flight per queue."""
    with connection.cursor() as cursor:
        cursor.execute(FORECAST_SQL, {"end": end, "sample": DURATION_SAMPLE, "recent": RECENT_RUNS})
        rows = cursor.fetchall()
        cursor.execute(IN_FLIGHT_SQL, {"cap": IN_FLIGHT_CAP})
        return rows, {queue_name(queue): count for queue, count in cursor.fetchall()}


def read_in_python(end: datetime) -> tuple[list[tuple], dict[str, int]]:
    """read_in_sql() through the ORM, for the embedded SQLite demo (no percentile_cont, LATERAL
    or date_trunc there): one query per due job for its last runs, so meant for a demo's few jobs."""
    due = Job.objects.filter(enabled=True, next_run_at__isnull=False, next_run_at__lt=end).order_by("next_run_at", "id")
    timed = set(due.values_list("id", flat=True)[:DURATION_SAMPLE])
    groups: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0])
    for job_id, *key, next_run_at in due.values_list(
        "id", "queue", "cron", "timezone", "every_seconds", "run_at", "calendar_id", "calendar_policy", "next_run_at"
    ):
        group = groups[(*key, truncate(next_run_at))]
        group[0] += 1
        if job_id in timed and (median := median_duration(job_id)) is not None:
            group[1] += median
            group[2] += 1
    in_flight: defaultdict[str, int] = defaultdict(int)
    for queue in JobRun.objects.filter(state__in=(RunState.QUEUED, RunState.RUNNING)).values_list(
        "job__queue", flat=True
    )[:IN_FLIGHT_CAP]:
        in_flight[queue_name(queue)] += 1
    return [(*key, *group) for key, group in groups.items()], dict(in_flight)


def median_duration(job_id: int) -> float | None:
    """The median run time of the job's last RECENT_RUNS runs that finished, as FORECAST_SQL's."""
    last = JobRun.objects.filter(job_id=job_id).order_by("-scheduled_at")[:RECENT_RUNS]
    return percentile_cont(
        [
            (finished - started).total_seconds()
            for state, started, finished in last.values_list("state", "started_at", "finished_at")
            if state in FINISHED_STATES and started and finished
        ],
        0.5,
    )


def add_fires(found: Forecast, rows: list[tuple], calendars: dict) -> None:
    """Each group's fires and work into its queue, per horizon."""
    fallback = queue_durations(rows)
    events: dict[str, list[tuple[datetime, float]]] = defaultdict(list)  # queue -> (fire time, its work)
    burst_end = found.now + timedelta(seconds=BURST_HORIZON)
    for queue, *schedule, first_minute, jobs, known_sum, known in rows:
        queue = queue_name(queue)
        per_fire = known_sum + (jobs - known) * fallback.get(queue, app_settings.FORECAST_DEFAULT_SECONDS)
        fires = group_fires(
            (*schedule, first_minute), found.now, found.now + timedelta(seconds=max(HORIZONS.values())), calendars
        )
        fires_in = found.fires.setdefault(queue, dict.fromkeys(HORIZONS, 0))
        work_in = found.work.setdefault(queue, dict.fromkeys(HORIZONS, 0.0))
        for horizon, seconds in HORIZONS.items():
            count = sum(1 for at in fires if at < found.now + timedelta(seconds=seconds))
            fires_in[horizon] += count * jobs
            work_in[horizon] += count * per_fire
        events[queue] += [(at, per_fire) for at in fires if at < burst_end]
    found.burst = {queue: most_in_one_window(found_events, lag_window()) for queue, found_events in events.items()}


def lag_window() -> float:
    """The target start lag as a window of seconds (at least one: a lag of 0 asks for a slot a run)."""
    return max(1.0, app_settings.FORECAST_TARGET_LAG_SECONDS)


def most_in_one_window(events: list[tuple[datetime, float]], seconds: float) -> float:
    """The most work due within any `seconds`-long window [t, t + seconds). Pure."""
    events = sorted(events)
    most = total = 0.0
    first = 0
    for at, work in events:
        total += work
        while events[first][0] <= at - timedelta(seconds=seconds):
            total -= events[first][1]
            first += 1
        most = max(most, total)
    return most


def queue_durations(rows: list[tuple]) -> dict[str, float]:
    """The mean of the known job medians in each queue: the duration of its jobs without one."""
    sums: defaultdict[str, float] = defaultdict(float)
    counts: defaultdict[str, int] = defaultdict(int)
    for row in rows:
        sums[queue_name(row[0])] += row[-2]
        counts[queue_name(row[0])] += row[-1]
    return {queue: sums[queue] / counts[queue] for queue in sums if counts[queue]}


def recommended_workers(work: dict[str, float], in_flight: int, burst: float = 0.0) -> int:
    """Workers so that each horizon's work, and its largest burst, start within the target lag
    (the docstring's formula)."""
    concurrency = app_settings.FORECAST_WORKER_CONCURRENCY
    lag = app_settings.FORECAST_TARGET_LAG_SECONDS
    needed = [math.ceil(in_flight / concurrency), math.ceil(burst / (lag_window() * concurrency))]
    needed += [
        math.ceil(work.get(horizon, 0.0) / ((seconds + lag) * concurrency)) for horizon, seconds in HORIZONS.items()
    ]
    return max(0, *needed)


_cached: tuple[float, Forecast] | None = None


def cached() -> Forecast:
    """compute(db_now()), reused for CRONFLEET_FORECAST_CACHE_SECONDS (0: never reused)."""
    global _cached
    ttl = app_settings.FORECAST_CACHE_SECONDS
    if _cached is not None and ttl > 0 and time.monotonic() - _cached[0] < ttl:
        return _cached[1]
    found = compute(db_now())
    _cached = (time.monotonic(), found)
    return found


class ForecastCollector:
    """The forecast as Prometheus gauges, beside ClusterCollector on the web's /metrics."""

    def collect(self):
        try:
            found = cached()
        except DatabaseError as exc:  # ClusterCollector says cronfleet_database_up 0
            logger.warning("metrics: the forecast's database did not answer: %s", exc)
            return
        yield by_horizon(
            "cronfleet_forecast_fires", "Fires due per queue within each horizon (overdue: due now)", found.fires
        )
        yield by_horizon(
            "cronfleet_forecast_work_seconds",
            "Expected run time due per queue within each horizon: fires x each job's recent median duration",
            found.work,
        )
        workers = GaugeMetricFamily(
            "cronfleet_forecast_workers",
            "Workers recommended per queue so that the "
            "forecast work starts within CRONFLEET_FORECAST_TARGET_LAG_SECONDS",
            labels=["queue"],
        )
        for queue, count in sorted(found.workers.items()):
            workers.add_metric([queue], count)
        yield workers


def by_horizon(name: str, documentation: str, values: dict[str, dict[str, float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["queue", "horizon"])
    for queue, horizons in sorted(values.items()):
        for horizon, value in horizons.items():
            family.add_metric([queue, horizon], value)
    return family
