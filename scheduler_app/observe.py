"""What a beat process reports about itself: its node row (nodes.py) after its turns.

runbeat makes one BeatObserver and hands it every completed turn; the observer heartbeats
the node at most every nodes.BEAT_HEARTBEAT_SECONDS. A heartbeat that fails is logged and
skipped: it must never cost the beat a turn (the node only looks stale for a while).
"""

from __future__ import annotations

import logging
import os
import socket

from django.db import DatabaseError

from scheduler_app import nodes
from scheduler_app.dispatch import TurnResult

logger = logging.getLogger("scheduler_app.beat")


class BeatObserver:
    def __init__(self, *, max_sleep: float) -> None:
        self.node = nodes.Registration(nodes.NodeKind.BEAT, f"beat@{socket.gethostname()}:{os.getpid()}",
                                       stale_after=nodes.beat_stale_after(max_sleep))
        self.turns = 0

    def turn(self, turn: TurnResult, seconds: float) -> None:
        """Account for one completed turn that took `seconds`."""
        self.turns += 1
        if self.node.due(nodes.BEAT_HEARTBEAT_SECONDS):
            self.heartbeat(activity(turn))

    def heartbeat(self, doing: str) -> None:
        try:
            self.node.heartbeat(doing)
        except DatabaseError as exc:  # the next turn's heartbeat tries again
            logger.warning("beat node heartbeat failed: %s", exc)

    def stop(self) -> None:
        try:
            self.node.stop()
        except DatabaseError as exc:
            logger.warning("could not mark the beat node stopped: %s", exc)


def activity(turn: TurnResult) -> str:
    """The beat's last turn in a few words, for the node's activity column."""
    done = [f"{count} {what}" for count, what in (
        (turn.claimed, "claimed"), (turn.published, "published"), (turn.skipped, "skipped"), (turn.held, "held"),
        (turn.released, "released"), (turn.requeued, "retries requeued"), (turn.lost, "lost"),
        (turn.republished, "republished"),
    ) if count]
    if turn.held_back:
        done.append(f"holding back {', '.join(turn.held_back)}")
    text = "turn: " + (", ".join(done) if done else "nothing due")
    return text + (" (busy)" if turn.busy else "")
