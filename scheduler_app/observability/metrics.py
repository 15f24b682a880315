"""Prometheus metrics of beats and workers, named cronfleet_*, as in-process counters.

Nothing here queries anything: a beat derives its figures from each turn's TurnResult
(observe_turn), a worker from its deliveries' Outcomes (observe_deliveries). The cluster's
gauges, read from the database and the broker at scrape time, are cluster.py's.

Exposition (serve):
- a beat serves its own process (`runbeat --metrics-port`);
- a Celery worker (`--metrics-port`) serves the sum over its pool processes, through
  prometheus-client's multiprocess mode: each process keeps its values in files of
  PROMETHEUS_MULTIPROC_DIR, a directory of this host (worker/step.py makes the worker one of
  its own when none is given);
- the web's /metrics (health.metrics_view) serves the cluster gauges, plus every family in
  PROMETHEUS_MULTIPROC_DIR when it has one (beats and workers sharing its host and
  directory). Scrape a process's own port or a shared directory, not both, or the same
  counts are summed twice.

Labels stay bounded: queues, target kinds, states and reason classes, never run or job ids.
A tenant label exists only on cronfleet_tenant_runs_finished_total, and that is counted only
with CRONFLEET_METRICS_TENANT_LABELS on.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    multiprocess,
    start_http_server,
)

from scheduler_app.ledger.lags import start_lag
from scheduler_app.models import TargetKind
from scheduler_app.queues import queue_name

logger = logging.getLogger(__name__)

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
if MULTIPROC_DIR:  # the values live in files there: it must exist before the first metric is made
    os.makedirs(MULTIPROC_DIR, exist_ok=True)
disable_created_metrics()  # no *_created series: they double the series for nothing we chart

# Seconds. Lags reach minutes when workers fall behind; runs last from milliseconds to an hour.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, float("inf"))
TURN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))

# --- beat ---------------------------------------------------------------------------------
BEAT_TURNS = Counter("cronfleet_beat_turns", "Beat turns completed")
BEAT_TURN_SECONDS = Histogram("cronfleet_beat_turn_duration_seconds", "How long a beat turn took", buckets=TURN_BUCKETS)
BEAT_STEP_SECONDS = Counter(
    "cronfleet_beat_step_seconds",
    "Seconds the beat's turns spent in each step (claim, plan, insert, windows, checkins, ...: dispatch/laps.py)",
    ["step"],
)
FIRES = Counter(
    "cronfleet_fires",
    "Fires the beat recorded as runs: queued, skipped (reason: why) or held (reason: quota or overlap)",
    ["queue", "outcome", "reason"],
)
DISPATCH_LAG = Histogram(
    "cronfleet_dispatch_lag_seconds",
    "Enqueued minus scheduled, of fires queued when claimed",
    ["queue"],
    buckets=LAG_BUCKETS,
)
PUBLISHED = Counter(
    "cronfleet_runs_published", "Run messages the beat published (new fires, retries, releases, republished)"
)
REPUBLISHED = Counter("cronfleet_runs_republished", "Queued runs published again: not started in time")
LOST = Counter("cronfleet_runs_lost", "Running runs whose lease ran out (their worker died or froze)")
RETRIES_REQUEUED = Counter("cronfleet_retries_requeued", "Retrying runs queued again after their backoff")
RELEASED = Counter("cronfleet_runs_released", "Runs held for their tenant's quota, queued as it freed")
BACKPRESSURE_HOLDS = Counter(
    "cronfleet_backpressure_holds",
    "Beat turns that claimed nothing for a queue over CRONFLEET_QUEUE_HIGH_WATER",
    ["queue"],
)

# --- worker -------------------------------------------------------------------------------
RUNS_FINISHED = Counter(
    "cronfleet_runs_finished",
    "Attempts a worker ended, by the state it left the run in (succeeded, failed, retrying, dead)",
    ["queue", "target", "state"],
)
TENANT_RUNS_FINISHED = Counter(
    "cronfleet_tenant_runs_finished",
    "cronfleet_runs_finished_total by tenant (only with CRONFLEET_METRICS_TENANT_LABELS)",
    ["tenant", "state"],
)
RUN_DURATION = Histogram(
    "cronfleet_run_duration_seconds",
    "From a run's start to its outcome, in the worker",
    ["queue", "target"],
    buckets=DURATION_BUCKETS,
)
START_LAG = Histogram(
    "cronfleet_start_lag_seconds",
    "Started minus scheduled (a scheduled fire's first attempt) "
    "or minus enqueued (retries and the rest): the wait for a worker",
    ["queue"],
    buckets=LAG_BUCKETS,
)
DUPLICATES = Counter(
    "cronfleet_duplicate_deliveries",
    "Deliveries that did not start their run (already started, finished or superseded), acknowledged without executing",
    ["queue"],
)
STALE_WRITES = Counter(
    "cronfleet_stale_writes_refused",
    "Outcomes refused because the attempt no longer owned its run (it was taken as lost)",
    ["queue"],
)
IN_PROGRESS = Gauge(
    "cronfleet_runs_in_progress", "execute_run deliveries being handled now", ["queue"], multiprocess_mode="livesum"
)

HTTP_IN_FLIGHT = Gauge(
    "cronfleet_http_in_flight", "HTTP attempts being sent or answered now", [], multiprocess_mode="livesum"
)
HTTP_WAITING = Gauge(
    "cronfleet_http_waiting",
    "HTTP attempts waiting for a slot (their host's share or the process's in-flight cap taken)",
    [],
    multiprocess_mode="livesum",
)
TIME_DATA_CHANGES = Gauge(
    "cronfleet_time_data_changes",
    "Fires jobs hold that the zone and holiday data installed moved, or that vanished, and fires that "
    "appeared before a held one, as this beat found when it started (kind: moved, appeared, vanished)",
    ["kind"],
    multiprocess_mode="livemax",
)
HTTP_HOSTS_SATURATED = Gauge(
    "cronfleet_http_hosts_saturated", "Target hosts with attempts waiting for a slot", [], multiprocess_mode="livesum"
)
HTTP_RESPONSES = Counter(
    "cronfleet_http_responses",
    "HTTP attempts by how they ended: the status class (2xx to 5xx), timeout, connection_error, blocked, not_called",
    ["outcome"],
)
# --- web -----------------------------------------------------------------------------------
PING_DROP_REASONS = ("own_runs", "key_rate", "unknown_keys")
PINGS_DROPPED = Counter(
    "cronfleet_pings_dropped",
    "Check-in pings answered without touching the ledger: the job's runs of its own at their hourly bound "
    "(own_runs), over the key's pings a minute (key_rate), from an address over its unknown keys a minute "
    "(unknown_keys)",
    ["reason"],
)
WEB_FAMILIES = (PINGS_DROPPED,)  # counted in the web's processes, served by its /metrics

FINISHED_STATES = ("succeeded", "failed", "retrying", "dead")
_REASON_CLASS = re.compile(r"[a-z_]{1,40}")


def reason_class(reason: str) -> str:
    """The class of a run's reason: its text before the first colon ("overlap_skip",
    "coalesced", "quota_concurrency"), "other" for anything else, so labels stay bounded."""
    head = reason.split(":", 1)[0].strip()
    return head if _REASON_CLASS.fullmatch(head) else "other"


def fire_outcome(state: str, reason: str) -> tuple[str, str]:
    """(outcome, reason) labels of a fire recorded in `state` with `reason`."""
    if state == "queued":
        return "queued", ""
    if state == "pending":
        why = "quota" if reason.startswith("quota_") else "overlap" if reason.startswith("overlap_") else "other"
        return "held", why
    return state, reason_class(reason)


def recorded_fires(rows, inserted: list[tuple[int, int, str]], jobs: dict[int, dict], now) -> list[tuple]:
    """(queue, state, reason, dispatch lag or None) of each run a dispatch inserted.

    `rows` are the planned dispatch.RunRow; `inserted` the (id, job id, state) the INSERT
    returned (a fire that already had a run is absent: ON CONFLICT DO NOTHING). Pure.
    """
    left = Tally((job_id, state) for _, job_id, state in inserted)
    found = []
    for row in rows:
        if left[(row.job_id, row.state)] > 0:
            left[(row.job_id, row.state)] -= 1
            lag = (now - row.scheduled_at).total_seconds() if row.state == "queued" else None
            found.append((queue_label(jobs[row.job_id]["queue"]), row.state, row.reason, lag))
    return found


def observe_turn(turn, seconds: float) -> None:
    """Count one completed beat turn (a dispatch.TurnResult) that took `seconds`."""
    BEAT_TURNS.inc()
    BEAT_TURN_SECONDS.observe(seconds)
    for step, spent in turn.steps.items():
        BEAT_STEP_SECONDS.labels(step).inc(spent)
    tally: Tally[tuple[str, str, str]] = Tally()
    lags: dict[str, list[float]] = {}
    for queue, state, reason, lag in turn.recorded:
        tally[(queue, *fire_outcome(state, reason))] += 1
        if lag is not None:
            lags.setdefault(queue, []).append(lag)
    for labels, count in tally.items():  # one increment per label set, not per fire
        FIRES.labels(*labels).inc(count)
    for queue, queue_lags in lags.items():
        observe_many(DISPATCH_LAG.labels(queue), queue_lags)
    for counter, count in (
        (PUBLISHED, turn.published),
        (REPUBLISHED, turn.republished),
        (LOST, turn.lost),
        (RETRIES_REQUEUED, turn.requeued),
        (RELEASED, turn.released),
    ):
        if count:
            counter.inc(count)
    for queue in turn.held_back:
        BACKPRESSURE_HOLDS.labels(queue_label(queue)).inc()


def observe_time_data(counts) -> None:
    """The start-up time-data check's counts by kind (services/impact.py)."""
    for kind in ("moved", "appeared", "vanished"):
        TIME_DATA_CHANGES.labels(kind).set(counts.get(kind, 0))


def observe_deliveries(outcomes: Iterable, queue: str, *, tenant_labels: bool = False) -> None:
    """Count deliveries of execute_run that ended with `outcomes` (execution.Outcome each):
    one write a series (and a histogram bucket) for the lot, not one per run."""
    lags: list[float] = []
    durations: dict[str, list[float]] = {}
    tally: Tally[tuple[Counter, tuple[str, ...]]] = Tally()
    for outcome in outcomes:
        started = outcome.started
        if started is not None:
            run = started.run
            lags.append(
                start_lag(
                    attempt=run.attempt,
                    trigger=run.trigger,
                    scheduled_at=run.scheduled_at,
                    enqueued_at=run.enqueued_at,
                    started_at=run.started_at,
                )
            )
        if outcome.state == "duplicate":
            tally[DUPLICATES, (queue,)] += 1
        elif outcome.state == "stale":
            tally[STALE_WRITES, (queue,)] += 1
        elif started is not None and outcome.state in FINISHED_STATES:
            target = started.job.target_kind
            tally[RUNS_FINISHED, (queue, target, outcome.state)] += 1
            if outcome.seconds is not None:
                durations.setdefault(target, []).append(outcome.seconds)
            if tenant_labels:
                tally[TENANT_RUNS_FINISHED, (started.tenant, outcome.state)] += 1
    if lags:
        observe_many(START_LAG.labels(queue), lags)
    for target, seconds in durations.items():
        observe_many(RUN_DURATION.labels(queue, target), seconds)
    for (counter, labels), count in tally.items():
        counter.labels(*labels).inc(count)


def observe_many(histogram, amounts: list[float]) -> None:
    """`histogram.observe(amount)` for each of `amounts` (finite numbers), with one write to
    its sum and one to each bucket that gets any: a write is a locked write to a shared file
    under PROMETHEUS_MULTIPROC_DIR. Reads prometheus_client's own fields of a histogram's
    child, as its observe() does (tests/unit/observability/test_metrics.py holds the
    two side by side)."""
    histogram._raise_if_not_observable()
    histogram._sum.inc(sum(amounts))
    per_bucket = Tally(bisect_left(histogram._upper_bounds, amount) for amount in amounts)
    for index, count in per_bucket.items():
        histogram._buckets[index].inc(count)


def initialise_worker(queues: Iterable[str]) -> None:
    """Make the worker's series for its queues exist at 0 before any run ends, so that the
    first failure or dead run is an increase Prometheus can see (rate() and increase() need
    a sample before it), not a series that starts at 1."""
    for queue in queues:
        queue = queue_label(queue)
        for target in TargetKind.values:
            for state in FINISHED_STATES:
                RUNS_FINISHED.labels(queue, target, state)
        DUPLICATES.labels(queue)
        STALE_WRITES.labels(queue)


def queue_label(queue: str) -> str:
    return queue_name(queue)


# --- exposition ---------------------------------------------------------------------------


class MissingMultiprocDir(RuntimeError):
    pass


def process_registry(*, forked: bool) -> CollectorRegistry:
    """The registry a process's exporter serves: the sum over this host's processes in
    PROMETHEUS_MULTIPROC_DIR when there is one, else this process's own metrics (which is
    everything only when nothing runs in forked children: `forked` says it does)."""
    if MULTIPROC_DIR:
        registry = CollectorRegistry()
        registry.register(LiveProcessesCollector(None, MULTIPROC_DIR))
        return registry
    if forked:
        raise MissingMultiprocDir(
            "a prefork pool runs tasks in child processes: set PROMETHEUS_MULTIPROC_DIR to a directory of this "
            "host (empty at first start) so that the exporter can add up their metrics"
        )
    return REGISTRY


def serve(port: int, address: str, *, forked: bool = False) -> None:
    """Serve the process's metrics (process_registry) on address:port from a daemon thread."""
    start_http_server(port, addr=address, registry=process_registry(forked=forked))
    logger.info(
        "metrics on http://%s:%s/metrics%s", address, port, f" (processes of {MULTIPROC_DIR})" if MULTIPROC_DIR else ""
    )


class LiveProcessesCollector(multiprocess.MultiProcessCollector):
    """MultiProcessCollector that first drops the live gauges (runs in progress) of
    processes that are gone: a pool process killed by its hard time limit never says so."""

    def collect(self):
        forget_dead_processes(self._path, counters=False)
        return super().collect()


def forget_dead_processes(path: str, *, counters: bool) -> list[int]:
    """Remove the files of processes of this host that no longer exist: only their live
    gauges, or (`counters`, at the start of the process that owns the directory) everything,
    which resets the totals that included them. Returns the pids forgotten."""
    gone = set()
    for name in glob.glob(os.path.join(path, "*.db")):
        pid = _pid_of(name)
        if pid is None or _alive(pid):
            continue
        gone.add(pid)
        if counters:
            os.remove(name)
    for pid in gone:
        multiprocess.mark_process_dead(pid, path)
    return sorted(gone)


def _pid_of(filename: str) -> int | None:
    stem = os.path.basename(filename).removesuffix(".db")
    tail = stem.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def names() -> set[str]:
    """Every metric name this module defines, as exposed (counters end in _total,
    histograms expose _bucket, _sum and _count)."""
    found = set()
    for metric in _families():
        for sample_suffix in _suffixes(metric._type):
            found.add(metric._name + sample_suffix)
    return found


def _families() -> Iterable:
    return [value for value in globals().values() if isinstance(value, (Counter, Gauge, Histogram))]


def _suffixes(kind: str) -> tuple[str, ...]:
    return {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}[kind]
