"""The beat's own upkeep of the tables a spike rewrites (PostgreSQL): VACUUM of the job
table, ANALYZE of the ledger.

Advancing a job (a new next_run_at, the key of job_due_idx and job_tenant_due_idx) is never
a HOT update: each claimed job leaves a dead row version and dead entries at the start of
its tenant's due range, exactly where the fair ranking's probes and reads, the claim's
lookups and seconds_until_due begin. Autovacuum comes too late for a spike (one look a
minute at most, a scale factor of 20% of the table by default, throttled by its cost
delay): at 1,000,000 due jobs nothing was vacuumed during the spike and the ranking read
~21,000 buffers where ~750 did after a VACUUM, so the rate fell from ~10,000 to ~5,500
fires/s. So a beat that has advanced `every` jobs since its last VACUUM starts
`VACUUM (SKIP_LOCKED) scheduler_app_job` on a thread of its own (its own connection): the
turns go on meanwhile, one VACUUM runs per beat at a time, and another beat's VACUUM
already under way makes this one a no-op (SKIP_LOCKED) rather than a wait. A VACUUM reads
the indexes whole, so its cost grows with the table, not with the dead rows: after one that
took t seconds the next waits at least COST_FACTOR * t, so VACUUM never takes more than about
a fifth of a database core per beat however fast jobs are advanced. Errors are logged, never
raised into the beat. SQLite has no dead index entries to clear: a no-op.

The ledger grows by one run a fire, and its statistics are as old as its last ANALYZE
(autovacuum's, a minute apart at best): before a spike they say it is empty. The planner
then took jobrun_active_idx (every queued run) for a few rows and read all of it, in a
BitmapAnd, for the recovery steps' "retrying" and "running" look-ups on every turn:
requeue_due_retries and mark_lost_runs grew from 1.3 to 10.6 µs a fire over 250,000 fires
of one beat (12.9 ms a call at 500,000 queued runs; 0.04 ms after an ANALYZE of 0.1 s,
through jobrun_state_recent_idx). So a beat that has inserted `every` runs (the fires it
claimed) since its last one runs `ANALYZE (SKIP_LOCKED) scheduler_app_jobrun` the same way.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connection, connections

from scheduler_app.conf import app_settings

logger = logging.getLogger(__name__)

VACUUM_JOBS = "VACUUM (SKIP_LOCKED) scheduler_app_job"
ANALYZE_RUNS = "ANALYZE (SKIP_LOCKED) scheduler_app_jobrun"
COST_FACTOR = 4  # seconds waited after a statement, at least, per second it took


class Upkeep:
    """Counts the fires a beat dispatched and runs `statement` (VACUUM or ANALYZE of one
    table) on a thread of its own every `every` of them; `every` 0: never."""

    def __init__(self, statement: str, *, every: int, what: str, clock=time.monotonic) -> None:
        self.statement = statement
        self.every = every
        self.what = what  # for the log: "job table vacuumed"
        self.enabled = self.every > 0 and connection.vendor == "postgresql"
        self.clock = clock
        self.advanced = 0  # fires since the last statement started
        self.runs = 0  # statements finished (with or without an error)
        self.not_before = float("-inf")  # COST_FACTOR times the last one's time after it ended
        self.thread: threading.Thread | None = None

    def note(self, advanced: int) -> bool:
        """Count `advanced` fires; start the statement when `every` have piled up and none of
        this beat's is running. Returns True when one was started."""
        if not self.enabled:
            return False
        self.advanced += advanced
        if self.advanced < self.every or self.running() or self.clock() < self.not_before:
            return False
        self.advanced = 0
        self.thread = threading.Thread(target=self._run, name=f"upkeep {self.what}", daemon=True)
        self.thread.start()
        return True

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self) -> None:
        started = self.clock()
        try:
            # A thread's own connection, in autocommit (VACUUM cannot run in a transaction).
            with connection.cursor() as cursor:
                # Not the session's statement_timeout (60 s): a VACUUM cancelled near its end
                # has done all its reading for nothing. It takes no lock a beat waits for.
                cursor.execute("SET statement_timeout = 0")
                cursor.execute(self.statement)
            logger.info("%s in %.2fs", self.what, self.clock() - started)
        except DatabaseError as exc:
            logger.warning("%s failed: %s: %s", self.statement, type(exc).__name__, exc)
        finally:
            ended = self.clock()
            self.not_before = ended + COST_FACTOR * (ended - started)
            self.runs += 1
            connections.close_all()  # this thread's connections only


def job_vacuum(*, every: int | None = None, clock=time.monotonic) -> Upkeep:
    """VACUUM of the job table every CRONFLEET_JOB_VACUUM_EVERY jobs advanced."""
    every = every if every is not None else app_settings.JOB_VACUUM_EVERY
    return Upkeep(VACUUM_JOBS, every=every, what="job table vacuumed", clock=clock)


def ledger_analyze(*, every: int | None = None, clock=time.monotonic) -> Upkeep:
    """ANALYZE of the ledger every CRONFLEET_LEDGER_ANALYZE_EVERY runs recorded."""
    every = every if every is not None else app_settings.LEDGER_ANALYZE_EVERY
    return Upkeep(ANALYZE_RUNS, every=every, what="ledger analyzed", clock=clock)
