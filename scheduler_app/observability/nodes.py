"""Beats and workers as nodes: each process registers a row and heartbeats it, so that
/readyz, `manage.py status`, the admin and /metrics can tell a live node from a frozen one.

- A beat heartbeats after a turn, at most every BEAT_HEARTBEAT_SECONDS. A beat turns at
  least every --max-sleep seconds, so it is stale once its last heartbeat is older than
  beat_stale_after(max_sleep) = 2 x max_sleep + STALE_MARGIN_SECONDS (15 s with the
  default --max-sleep of 5). A frozen beat (SIGSTOP, a hung turn) stops heartbeating; an
  idle one does not.
- A worker heartbeats from a thread of its main process every WORKER_HEARTBEAT_SECONDS
  (never per run), and is stale after WORKER_STALE_AFTER_SECONDS. Its activity carries the
  HTTP attempts of its pool processes (http_flight, FLIGHT_TEXT), and its queues say which
  queues have a live consumer (queue_consumers: the beat publishes no copies elsewhere).

Each row carries its own bound (stale_after_seconds), so a reader needs to know nothing of
how the node was started, and the bound is judged by the database's clock like everything
else. A node that stops cleanly marks its row stopped. Rows not seen for NODE_RETENTION are
deleted whenever a node registers: the table holds about a day of nodes, a few dozen rows.

The Node model itself is in models/nodes.py.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from django.db.models.functions import Now
from prometheus_client import multiprocess

from scheduler_app.models import Node, NodeKind

logger = logging.getLogger(__name__)

BEAT_HEARTBEAT_SECONDS = 2.0  # a busy beat turns many times a second: one write per this long
STALE_MARGIN_SECONDS = 5.0  # room for a turn's own duration on top of two sleeps
WORKER_HEARTBEAT_SECONDS = 5.0
WORKER_STALE_AFTER_SECONDS = 3 * WORKER_HEARTBEAT_SECONDS
NODE_RETENTION = timedelta(days=1)
VERSION = os.environ.get("CRONFLEET_VERSION") or "dev"  # the image tag, say; shown in the admin and status


def beat_stale_after(max_sleep: float) -> float:
    """Seconds without a heartbeat after which a beat running with --max-sleep is stale."""
    return 2 * max(max_sleep, BEAT_HEARTBEAT_SECONDS) + STALE_MARGIN_SECONDS


@dataclass(frozen=True)
class NodeState:
    """A node row judged at `now` (the database's clock)."""

    node: Node
    age: float  # seconds since last seen

    @property
    def state(self) -> str:
        if self.node.stopped_at is not None:
            return "stopped"
        return "live" if self.age <= self.node.stale_after_seconds else "stale"

    @property
    def live(self) -> bool:
        return self.state == "live"


def node_states(now: datetime, *, kind: str | None = None) -> list[NodeState]:
    """Every known node (a few dozen rows at most) judged at `now`, the database's clock."""
    rows = Node.objects.all() if kind is None else Node.objects.filter(kind=kind)
    return [NodeState(node, max(0.0, (now - node.last_seen_at).total_seconds())) for node in rows]


def queue_consumers(states: Iterable[NodeState]) -> dict[str, int]:
    """Live workers consuming each queue, by the queues their heartbeats name (the broker's
    own consumer count is not there on Redis: kombu's transport reports 0 consumers)."""
    consumers: dict[str, int] = {}
    for state in states:
        if state.node.kind == NodeKind.WORKER and state.live:
            for queue in state.node.queues:
                consumers[queue] = consumers.get(queue, 0) + 1
    return consumers


def last_consumed_at(states: Iterable[NodeState]) -> dict[str, datetime]:
    """The last time a worker consuming each queue was seen (live, stale or stopped; rows
    are kept NODE_RETENTION): a queue missing here had no worker for at least that long."""
    seen: dict[str, datetime] = {}
    for state in states:
        if state.node.kind == NodeKind.WORKER:
            for queue in state.node.queues:
                if queue not in seen or seen[queue] < state.node.last_seen_at:
                    seen[queue] = state.node.last_seen_at
    return seen


# A worker's HTTP attempts, summed over its pool processes, as its heartbeat's activity says
# them (the node row has no column for them; the text is what status and the admin show).
FLIGHT_GAUGES = {
    "cronfleet_http_in_flight": "in_flight",
    "cronfleet_http_waiting": "waiting",
    "cronfleet_http_hosts_saturated": "hosts_saturated",
}
FLIGHT_TEXT = "http {in_flight} in flight, {waiting} waiting, {hosts_saturated} hosts saturated"
FLIGHT_PATTERN = re.compile(
    r"http (?P<in_flight>\d+) in flight, (?P<waiting>\d+) waiting, "
    r"(?P<hosts_saturated>\d+) hosts saturated"
)


def http_flight(directory: str, pids: Iterable[int]) -> dict[str, int]:
    """The HTTP attempts in flight, waiting for a slot and the saturated hosts of processes
    `pids`, summed from their live gauges in the prometheus multiprocess `directory`: the
    worker's pool processes keep the attempts (worker/flight.py) and their gauges there."""
    wanted = {str(pid) for pid in pids}
    files = [
        name
        for name in glob.glob(os.path.join(directory, "gauge_livesum_*.db"))
        if name.removesuffix(".db").rsplit("_", 1)[-1] in wanted
    ]
    counts = dict.fromkeys(FLIGHT_GAUGES.values(), 0)
    for metric in multiprocess.MultiProcessCollector._read_metrics(files).values():
        if metric.name in FLIGHT_GAUGES:
            counts[FLIGHT_GAUGES[metric.name]] += int(sum(sample.value for sample in metric.samples))
    return counts


def flight_of(activity: str) -> dict[str, int] | None:
    """The HTTP counts a worker's activity carries (FLIGHT_TEXT), None when it has none."""
    found = FLIGHT_PATTERN.search(activity)
    return {key: int(value) for key, value in found.groupdict().items()} if found else None


class Registration:
    """This process's node row: register() once, heartbeat() as often as is due, stop() at exit."""

    def __init__(self, kind: str, name: str, *, stale_after: float, queues: Iterable[str] = ()) -> None:
        self.kind, self.name, self.stale_after = kind, name, stale_after
        self.queues = sorted(set(queues))
        self.id: int | None = None
        self.last_beat = float("-inf")  # monotonic time of the last heartbeat

    def register(self, activity: str = "starting") -> None:
        Node.objects.filter(last_seen_at__lt=Now() - NODE_RETENTION).delete()
        node = Node.objects.create(
            kind=self.kind,
            name=self.name[:255],
            host=socket.gethostname()[:255],
            pid=os.getpid(),
            version=VERSION,
            queues=self.queues,
            activity=activity[:500],
            started_at=Now(),
            last_seen_at=Now(),
            stale_after_seconds=self.stale_after,
        )
        self.id = node.id
        self.last_beat = time.monotonic()

    def due(self, every: float) -> bool:
        return time.monotonic() - self.last_beat >= every

    def heartbeat(self, activity: str, *, queues: Iterable[str] | None = None) -> None:
        """One UPDATE: seen now (by the database's clock), doing `activity`. Registers again
        if the row is gone (pruned after a very long freeze)."""
        fields = {"last_seen_at": Now(), "activity": activity[:500]}
        if queues is not None:
            self.queues = sorted(set(queues))
            fields["queues"] = self.queues
        if self.id is None or not Node.objects.filter(id=self.id).update(**fields):
            self.register(activity)
        self.last_beat = time.monotonic()

    def stop(self) -> None:
        if self.id is not None:
            Node.objects.filter(id=self.id).update(stopped_at=Now(), last_seen_at=Now(), activity="stopped")


class HeartbeatThread:
    """Heartbeats a node from a daemon thread every `interval` seconds with `activity()`.

    The thread opens its database connection for each heartbeat and closes it after, so a
    worker's main process holds no connection between heartbeats (nor one its forked pool
    processes could inherit).
    """

    def __init__(
        self, registration: Registration, activity: Callable[[], str], *, interval: float = WORKER_HEARTBEAT_SECONDS
    ) -> None:
        self.registration, self.activity, self.interval = registration, activity, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cronfleet-node", daemon=True)

    def start(self) -> None:
        self._beat(register=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval + 5)
        try:
            self.registration.stop()
        except DatabaseError as exc:
            logger.warning("could not mark node %s stopped: %s", self.registration.name, exc)
        finally:
            connection.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._beat()

    def _beat(self, *, register: bool = False) -> None:
        try:
            if register:
                self.registration.register()
            else:
                self.registration.heartbeat(self.activity())
        except DatabaseError as exc:  # the next heartbeat tries again; missing some only makes the node look stale
            logger.warning("node heartbeat of %s failed: %s", self.registration.name, exc)
        finally:
            connection.close()  # this thread's own connection
