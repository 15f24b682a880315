"""The cluster now, as the database and the broker see it: the due backlog and its oldest
fire, runs in flight and waiting (by reason), broker queue depths, beats and workers.

Read when asked (the web's /metrics at each scrape, `manage.py status`). Every query walks
an index sized to the work due or in flight, never the job table or the ledger as a whole,
so a scrape costs the same at a million jobs and ten million runs (docs/operating.md, Monitoring):

- the due count walks job_due_idx up to the due instant, at most DUE_COUNT_CAP entries;
- runs in flight are read through an index on their state (jobrun_state_recent_idx, or
  the partial jobrun_active_idx whose predicate is the statement's): the cost follows the
  runs in flight, whatever the size of the ledger's history;
- the queues worth a depth are the default, CRONFLEET_QUEUES, the nodes' and those of up
  to QUEUED_SAMPLE jobs with a queued run (jobrun_queued_idx, then each job by primary key);
- nodes are a few dozen rows; queue depths one broker connection for all queues.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError, connection
from prometheus_client.core import GaugeMetricFamily

from scheduler_app.conf import app_settings
from scheduler_app.models import NodeKind, db_now
from scheduler_app.observability.nodes import NodeState, node_states, queue_consumers
from scheduler_app.queues import broker_errors, queue_depths, queue_name

logger = logging.getLogger(__name__)

# Due jobs counted at most (a walk of the due index): past this, the gauge says "at least".
DUE_COUNT_CAP = 1_000_000

DUE_SQL = """
SELECT count(*), min(next_run_at)
  FROM (SELECT next_run_at FROM scheduler_app_job
         WHERE enabled AND next_run_at IS NOT NULL AND next_run_at <= %(now)s
         ORDER BY next_run_at LIMIT %(cap)s) AS due
"""
# The queues of jobs with runs waiting in the broker (a run queued by a trigger or a backfill
# reaches a queue no beat or worker may know of). A sample bounds the cost in a spike.
QUEUED_SAMPLE = 1000
QUEUED_QUEUES_SQL = """
SELECT DISTINCT job.queue
  FROM (SELECT DISTINCT job_id FROM scheduler_app_jobrun WHERE state = 'queued' LIMIT %(sample)s) AS run
  JOIN scheduler_app_job AS job ON job.id = run.job_id
"""
# The predicate is jobrun_active_idx's, so the planner reads that partial index only.
IN_FLIGHT_SQL = """
SELECT state,
       CASE WHEN state <> 'pending' THEN ''
            WHEN substr(reason, 1, 6) = 'quota_' THEN 'quota'
            WHEN substr(reason, 1, 8) = 'overlap_' THEN 'overlap'
            ELSE 'other' END,
       count(*)
  FROM scheduler_app_jobrun
 WHERE state IN ('pending', 'queued', 'running', 'retrying')
 GROUP BY 1, 2
"""


@dataclass
class Snapshot:
    now: datetime
    due_jobs: int
    oldest_due_seconds: float  # 0 when nothing is due
    in_flight: dict[str, int]  # queued, running, retrying
    waiting: dict[str, int]  # pending runs by reason: quota, overlap (other: none expected)
    nodes: list[NodeState]
    queue_depths: dict[str, int] | None  # None: the broker did not answer
    broker_error: str = ""
    seconds: float = 0.0  # how long taking the snapshot took
    queue_workers: dict[str, int] = field(default_factory=dict)  # live workers consuming each queue
    # Queues with runs queued (of the QUEUED_SAMPLE) or messages waiting and no live worker:
    # the beat does not publish their runs again, and skips them after
    # CRONFLEET_UNCONSUMED_EXPIRE_SECONDS (dispatch/recovery.py).
    unconsumed: list[str] = field(default_factory=list)

    @property
    def due_capped(self) -> bool:
        return self.due_jobs >= DUE_COUNT_CAP

    def live(self, kind: str) -> list[NodeState]:
        return [node for node in self.nodes if node.node.kind == kind and node.live]


def known_queues(nodes: list[NodeState], queued: Sequence[str] = ()) -> list[str]:
    """The queues worth a depth: the default, CRONFLEET_QUEUES, the `queued` ones (where runs
    wait), and every queue a node that has not stopped consumes (workers) or has claimed
    jobs for (beats)."""
    queues = {queue_name(""), *app_settings.QUEUES, *(queue_name(queue) for queue in queued)}
    for node in nodes:
        if node.state != "stopped":
            queues.update(node.node.queues)
    return sorted(queues)


def snapshot(*, depths: bool = True) -> Snapshot:
    """The cluster now. Raises DatabaseError when the database does not answer; a broker
    that does not answer leaves queue_depths None and says why in broker_error."""
    began = time.monotonic()
    now = db_now()
    with connection.cursor() as cursor:
        cursor.execute(DUE_SQL, {"now": connection.ops.adapt_datetimefield_value(now), "cap": DUE_COUNT_CAP})
        due, oldest = cursor.fetchone()
        cursor.execute(IN_FLIGHT_SQL)
        rows = cursor.fetchall()
        cursor.execute(QUEUED_QUEUES_SQL, {"sample": QUEUED_SAMPLE})
        queued = [row[0] for row in cursor.fetchall()]
    if isinstance(oldest, str):  # SQLite
        oldest = connection.ops.convert_datetimefield_value(oldest, None, connection)
    in_flight = {"queued": 0, "running": 0, "retrying": 0}
    waiting = {"quota": 0, "overlap": 0}
    for state, reason, count in rows:
        if state == "pending":
            waiting[reason] = waiting.get(reason, 0) + count
        else:
            in_flight[state] = count
    nodes = node_states(now)
    oldest_age = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
    found = Snapshot(
        now=now,
        due_jobs=due,
        oldest_due_seconds=oldest_age,
        in_flight=in_flight,
        waiting=waiting,
        nodes=nodes,
        queue_depths=None,
    )
    queues = known_queues(nodes, queued)
    workers = queue_consumers(nodes)
    found.queue_workers = {queue: workers.get(queue, 0) for queue in queues}
    if depths:
        try:
            found.queue_depths = queue_depths(queues)
        except broker_errors() as exc:
            found.broker_error = f"{type(exc).__name__}: {exc}"
    waiting_in = {queue_name(queue) for queue in queued} | {
        queue for queue, depth in (found.queue_depths or {}).items() if depth
    }
    found.unconsumed = sorted(queue for queue in waiting_in if not found.queue_workers.get(queue))
    found.seconds = time.monotonic() - began
    return found


class ClusterCollector:
    """The snapshot as Prometheus gauges, taken at each scrape."""

    def collect(self):
        try:
            found = snapshot()
        except DatabaseError as exc:
            logger.warning("metrics: the database did not answer: %s", exc)
            yield gauge("cronfleet_database_up", "1 when the database answered this scrape", 0)
            return
        yield gauge("cronfleet_database_up", "1 when the database answered this scrape", 1)
        yield gauge(
            "cronfleet_broker_up", "1 when the broker answered this scrape", 0 if found.queue_depths is None else 1
        )
        yield gauge(
            "cronfleet_due_jobs",
            f"Enabled jobs whose next fire time has passed (counted up to {DUE_COUNT_CAP})",
            found.due_jobs,
        )
        yield gauge(
            "cronfleet_oldest_due_seconds",
            "Age of the oldest due fire not yet claimed (0: none due)",
            found.oldest_due_seconds,
        )
        yield labelled("cronfleet_runs_in_flight", "Runs queued, running or waiting to retry", "state", found.in_flight)
        yield labelled(
            "cronfleet_runs_waiting",
            "Runs recorded as pending, by why: their tenant's quota or their job's overlap policy",
            "reason",
            found.waiting,
        )
        if found.queue_depths is not None:
            yield labelled(
                "cronfleet_queue_depth", "Messages waiting in each broker queue", "queue", found.queue_depths
            )
        yield labelled(
            "cronfleet_queue_workers", "Live workers consuming each known queue", "queue", found.queue_workers
        )
        yield labelled(
            "cronfleet_queue_unconsumed",
            "1 for each queue with runs or messages waiting and no live "
            "worker consuming it: its runs are not published again and expire (no_consumer)",
            "queue",
            dict.fromkeys(found.unconsumed, 1),
        )
        states = Counter((node.node.kind, node.state) for node in found.nodes)
        nodes = GaugeMetricFamily(
            "cronfleet_nodes", "Beats and workers by state (live, stale, stopped)", labels=["kind", "state"]
        )
        for kind in NodeKind.values:
            for state in ("live", "stale", "stopped"):
                nodes.add_metric([kind, state], states.get((kind, state), 0))
        yield nodes
        seen = GaugeMetricFamily(
            "cronfleet_node_last_seen_seconds",
            "Seconds since each beat or worker that has not stopped was last seen",
            labels=["kind", "node"],
        )
        for node in found.nodes:
            if node.state != "stopped":
                seen.add_metric([node.node.kind, node.node.name], node.age)
        yield seen
        yield gauge("cronfleet_cluster_scrape_seconds", "How long reading these gauges took", found.seconds)


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def labelled(name: str, documentation: str, label: str, values: dict[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


# Every name ClusterCollector and its siblings forecast.ForecastCollector, checks.CheckCollector
# and objectives.ObjectiveCollector expose (the dashboard's and the alerts' queries are
# checked against these and metrics.names());
# checks' cronfleet_tenant_checks too, with CRONFLEET_METRICS_TENANT_LABELS only.
NAMES = {
    "cronfleet_database_up",
    "cronfleet_broker_up",
    "cronfleet_due_jobs",
    "cronfleet_oldest_due_seconds",
    "cronfleet_runs_in_flight",
    "cronfleet_runs_waiting",
    "cronfleet_queue_depth",
    "cronfleet_queue_workers",
    "cronfleet_queue_unconsumed",
    "cronfleet_nodes",
    "cronfleet_node_last_seen_seconds",
    "cronfleet_cluster_scrape_seconds",
    "cronfleet_forecast_fires",
    "cronfleet_forecast_work_seconds",
    "cronfleet_forecast_workers",
    "cronfleet_checks",
    "cronfleet_objective_events",
    "cronfleet_objective_good_events",
    "cronfleet_objective_target",
    "cronfleet_objective_window_seconds",
    "cronfleet_objective_attainment",
    "cronfleet_objective_error_budget_remaining",
    "cronfleet_objective_counted_seconds",
}
# The counters among them (their samples end in _total).
COUNTERS = {"cronfleet_objective_events", "cronfleet_objective_good_events"}
