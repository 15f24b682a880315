"""What a beat process reports about itself: its metrics and its node row.

runbeat makes one BeatObserver and hands it every completed turn. The observer counts the
turn (metrics.observe_turn: in-process counters, derived from the TurnResult; the seconds of
its steps add up, told in one line when the beat stops: dispatch/laps.py) and heartbeats
the node at most every nodes.BEAT_HEARTBEAT_SECONDS, with the queues the beat has claimed
for. A heartbeat that fails is logged and skipped: it must never cost the beat a turn (the
node only looks stale for a while). With a metrics port, the process serves its metrics.
"""

from __future__ import annotations

import logging
import os
import socket

from django.db import DatabaseError

from scheduler_app.dispatch.laps import StepTotals
from scheduler_app.dispatch.turn import TurnResult
from scheduler_app.models import NodeKind
from scheduler_app.observability import logformat, metrics, nodes

logger = logging.getLogger("scheduler_app.beat")


class BeatObserver:
    def __init__(self, *, max_sleep: float, metrics_port: int | None = None, metrics_address: str = "") -> None:
        self.node = nodes.Registration(
            NodeKind.BEAT, f"beat@{socket.gethostname()}:{os.getpid()}", stale_after=nodes.beat_stale_after(max_sleep)
        )
        logformat.set_node(self.node.name)
        self.queues: set[str] = set()
        self.queues_changed = False
        self.steps = StepTotals()
        if metrics_port:
            metrics.serve(metrics_port, metrics_address)

    def turn(self, turn: TurnResult, seconds: float) -> None:
        """Account for one completed turn that took `seconds`."""
        metrics.observe_turn(turn, seconds)
        self.steps.add(turn.steps)
        queues = {queue for queue, *_ in turn.recorded} | {metrics.queue_label(queue) for queue in turn.held_back}
        if not queues <= self.queues:
            self.queues |= queues
            self.queues_changed = True
        if self.node.due(nodes.BEAT_HEARTBEAT_SECONDS):
            self.heartbeat(activity(turn))

    def heartbeat(self, doing: str) -> None:
        try:
            self.node.heartbeat(doing, queues=self.queues if self.queues_changed or self.node.id is None else None)
            self.queues_changed = False
        except DatabaseError as exc:  # the next turn's heartbeat tries again
            logger.warning("beat node heartbeat failed: %s", exc)

    def say(self, stdout, text: str) -> None:
        """A line for the operator: on stdout, or a log record when every line must be JSON."""
        if logformat.json_wanted():
            logger.info(text)
        else:
            stdout.write(text)

    def stop(self) -> None:
        if self.steps.turns:
            logger.info("%s", self.steps.line())
        try:
            self.node.stop()
        except DatabaseError as exc:
            logger.warning("could not mark the beat node stopped: %s", exc)


def activity(turn: TurnResult) -> str:
    """The beat's last turn in a few words, for the node's activity column."""
    done = [
        f"{count} {what}"
        for count, what in (
            (turn.claimed, "claimed"),
            (turn.published, "published"),
            (turn.skipped, "skipped"),
            (turn.held, "held"),
            (turn.released, "released"),
            (turn.requeued, "retries requeued"),
            (turn.lost, "lost"),
            (turn.republished, "republished"),
        )
        if count
    ]
    if turn.held_back:
        done.append(f"holding back {', '.join(turn.held_back)}")
    text = "turn: " + (", ".join(done) if done else "nothing due")
    return text + (" (busy)" if turn.busy else "")
