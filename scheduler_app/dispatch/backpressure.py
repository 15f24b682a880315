"""Backpressure: leave the jobs of broker queues over the high-water mark unclaimed."""

from __future__ import annotations

import logging

from scheduler_app.conf import app_settings
from scheduler_app.dispatch.common import _local
from scheduler_app.queues import broker_errors, queue_depths, queue_name

logger = logging.getLogger("scheduler_app.dispatch")


# Longest beat sleep while a queue is held back (workers drain it unannounced), doubled for
# each turn in a row that could claim nothing else, up to BACKPRESSURE_POLL_MAX_SECONDS: each
# such turn ranks the due set again (on PostgreSQL, about as many rows as a claim lists).
BACKPRESSURE_POLL_SECONDS = 0.5
BACKPRESSURE_POLL_MAX_SECONDS = 2.0


class Backpressure:
    """Keeps the broker shallow: the job queues this beat has claimed for, and which of
    them hold CRONFLEET_QUEUE_HIGH_WATER messages or more (one broker call per turn).

    The jobs of a full queue are not claimed: they stay due in the database, where the next
    claim ranks them fairly with whatever fell due meanwhile, instead of queueing behind
    a tenant's spike at the workers. A fire claimed later than the misfire grace follows
    its job's misfire policy. A queue this beat has not claimed for yet is learnt at its
    first claim, so several beats overshoot the mark by at most a batch each.
    """

    def __init__(self) -> None:
        self.queues: set[str] = set()
        self.last_full: list[str] = []
        self.quiet_turns = 0  # turns in a row that held queues back and claimed nothing

    def poll_seconds(self) -> float:
        return min(BACKPRESSURE_POLL_SECONDS * 2**self.quiet_turns, BACKPRESSURE_POLL_MAX_SECONDS)

    def note(self, jobs: list[dict]) -> None:
        self.queues.update(job["queue"] for job in jobs)

    def full(self) -> list[str]:
        high_water = app_settings.QUEUE_HIGH_WATER
        if not high_water or not self.queues:
            return []
        try:
            depths = queue_depths(sorted(self.queues))
        except broker_errors() as exc:  # claim as usual: the publish fails too and the sweep sends the runs later
            logger.warning("backpressure: could not read the broker queues' depths (%s: %s)", type(exc).__name__, exc)
            return []
        full = sorted(queue for queue, depth in depths.items() if depth >= high_water)
        if full != self.last_full:  # said when it changes, not every turn
            logger.info(
                "backpressure: queues holding %s messages or more, not claimed for: %s",
                high_water,
                [queue_name(queue) for queue in full] or "none",
            )
            self.last_full = full
        return full


def _backpressure() -> Backpressure:
    """This thread's Backpressure (as _fair_order)."""
    if not hasattr(_local, "backpressure"):
        _local.backpressure = Backpressure()
    return _local.backpressure


def forget_backpressure() -> None:
    """Forget the queues this thread has claimed for (tests, which use a queue each)."""
    _local.backpressure = Backpressure()
