"""Leases of the runs a worker process is executing, renewed by one thread per process.

The lease, not the job's timeout, is how a beat tells a dead or frozen worker from a slow
one: a worker that stops heartbeating (killed, SIGSTOPped, cut off) loses its runs after
CRONFLEET_LEASE_SECONDS, and its later writes are refused (fencing). One thread renews
every run the process holds in one statement each CRONFLEET_HEARTBEAT_SECONDS, so a run
costs no thread of its own and a batch of runs one statement per heartbeat.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection

from scheduler_app.conf import app_settings
from scheduler_app.worker import transitions

logger = logging.getLogger(__name__)


TICK_SECONDS = 0.5  # how often the thread looks for leases due a renewal


class Leases:
    def __init__(self) -> None:
        self._owned: dict[int, tuple[int, float]] = {}  # run id -> (attempt, monotonic time of the last renewal)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    @contextmanager
    def held(self, owned: dict[int, int], since: float | None = None) -> Iterator[None]:
        """Keep renewing the leases of {run id: attempt} while the block runs (or until
        release() lets one go: a batch's run whose outcome is written), from this
        process's thread. `since`: the time.monotonic() before the start was sent."""
        self.hold(owned, since)
        with self._lock:
            self._ensure_thread()
        try:
            yield
        finally:
            self.release(owned)

    def hold(self, owned: dict[int, int], since: float | None = None) -> None:
        """Count {run id: attempt} as held since `since` (default: now), for a caller that
        renews them itself with renew_due() (worker/flight.py's database thread)."""
        since = time.monotonic() if since is None else since
        with self._lock:
            self._owned.update((run_id, (attempt, since)) for run_id, attempt in owned.items())

    def holds(self, run_id: int) -> bool:
        """Whether this process may still act for the run: its lease was not lost, and
        was last confirmed recently enough that no beat can have taken it as lost yet.

        Asked before each target is called (a batch's next run, an HTTP attempt that
        waited for its slot). A worker cut off from the database cannot renew, so its
        leases run out by the database's clock and a beat may hand the runs to another
        worker: after LEASE - HEARTBEAT/2 seconds without a confirmed renewal (a renewal is
        due after HEARTBEAT) this says no, before the database's LEASE seconds, counted
        from the same statement, are up; so a superseded attempt never reaches a target
        after its successor started."""
        with self._lock:
            owned = self._owned.get(run_id)
        if owned is None:
            return False
        margin = app_settings.LEASE_SECONDS - app_settings.HEARTBEAT_SECONDS / 2
        return time.monotonic() < owned[1] + margin

    def release(self, run_ids) -> None:
        with self._lock:
            for run_id in run_ids:
                self._owned.pop(run_id, None)

    def _ensure_thread(self) -> None:
        # A forked pool process inherits the object but not the thread: start one per process.
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._renew_forever, name="cronfleet-leases", daemon=True)
            self._thread.start()

    def _renew_forever(self) -> None:
        while True:  # as long as the process: the thread is a daemon
            time.sleep(TICK_SECONDS)
            if self.renew_due() is None:
                connection.close()  # hold no database connection while there is nothing to renew

    def renew_due(self) -> int | None:
        """Renew the leases due a renewal, in one statement; how many were due (None:
        no lease is held at all)."""
        due_before = time.monotonic() - app_settings.HEARTBEAT_SECONDS
        with self._lock:
            if not self._owned:
                return None
            due = {run_id: attempt for run_id, (attempt, renewed) in self._owned.items() if renewed <= due_before}
        if due:
            self.renew(due)
        return len(due)

    def renew(self, owned: dict[int, int]) -> None:
        sent = time.monotonic()  # the new lease runs from the statement, not from its answer
        try:
            renewed = transitions.renew_leases(owned)
        except DatabaseError as exc:  # the next beat retries; a missed heartbeat only shortens the lease
            logger.warning("heartbeat for %s runs failed: %s", len(owned), exc)
            connection.close()  # this thread's own connection: a fresh one next time
            return
        lost = set(owned) - renewed
        if lost:
            logger.warning("runs %s lost their lease; no longer renewed", sorted(lost)[:20])
        with self._lock:
            for run_id, attempt in owned.items():
                if self._owned.get(run_id, (None,))[0] != attempt:
                    continue  # finished meanwhile (or held again by another attempt)
                if run_id in lost:
                    del self._owned[run_id]
                else:
                    self._owned[run_id] = (attempt, sent)


LEASES = Leases()
