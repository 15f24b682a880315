"""How a beat sleeps between turns, and how the rest of the deployment wakes it: a sleep
ends at its timeout, at a stop request, or (on PostgreSQL) at a NOTIFY on WAKE_CHANNEL,
which the services send when a job is created, changed or resumed (wake_beats)."""

from __future__ import annotations

import logging
import threading
import time

from django.db import connection

from scheduler_app.models.lifecycle import WAKE_CHANNEL, wake_beats  # noqa: F401 (wake_beats: the services')

logger = logging.getLogger("scheduler_app.beat")


class Waker:
    """Sleeps until a timeout, a stop request, or (on PostgreSQL) a NOTIFY that a job changed.

    The LISTEN connection is best effort: if it breaks (a database restart), the beat
    falls back to plain timed sleeps and listens again on the next sleep.
    """

    SLICE = 0.5  # seconds: how quickly a stop request is noticed while listening

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.listener = None
        self.enabled = connection.vendor == "postgresql"

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            listener = self._listener()
            if listener is None:
                self.stop.wait(min(left, self.SLICE))
                continue
            try:
                if any(True for _ in listener.notifies(timeout=min(left, self.SLICE), stop_after=1)):
                    for _ in listener.notifies(timeout=0):  # drain: one wake-up is enough
                        pass
                    return
            except connection.Database.Error as exc:
                logger.warning("LISTEN connection lost (%s); sleeping without it", exc)
                self.close()
                self.stop.wait(min(left, self.SLICE))

    def _listener(self):
        if self.listener is None and self.enabled:
            try:
                self.listener = connection.get_new_connection(connection.get_connection_params())
                self.listener.autocommit = True
                self.listener.execute(f"LISTEN {WAKE_CHANNEL}")
            except connection.Database.Error as exc:
                logger.warning("cannot LISTEN for job changes (%s)", exc)
                self.close()
        return self.listener

    def close(self) -> None:
        if self.listener is not None:
            try:
                self.listener.close()
            finally:
                self.listener = None
