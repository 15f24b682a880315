"""The beat loop. Safe to run any number of copies at once, on one machine or many."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, InterfaceError, close_old_connections, connection, reset_queries

from scheduler_app import alerts, dispatch
from scheduler_app.conf import app_settings
from scheduler_app.dispatch.observe import BeatObserver
from scheduler_app.dispatch.vacuum import job_vacuum, ledger_analyze
from scheduler_app.dispatch.waker import Waker
from scheduler_app.ledger import retention
from scheduler_app.management.tables import OneLineErrors, require_tables
from scheduler_app.models import db_now
from scheduler_app.queues import broker_errors
from scheduler_app.services.impact import startup_check

logger = logging.getLogger("scheduler_app.beat")
RETRY_PAUSE = 1.0  # seconds
DELIVERER_STOP_SECONDS = 5.0  # how long a stopping beat waits for an alert being sent
SWEEP_EVERY = 2.0  # seconds between looks for runs to publish again (a few queries and a broker call)


class Command(OneLineErrors, BaseCommand):
    help = "Turn due jobs into runs and publish them to Celery. Safe to run several copies at once."
    # The checks of every Cronfleet command (tables.COMMAND_CHECKS): not the URL checks, whose
    # URLconf (the REST API and its schema libraries) is about 30 MiB a beat never uses, nor
    # the admin's.

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Run one turn, then exit")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=app_settings.BATCH_SIZE,
            help="Due jobs claimed per transaction (default %(default)s)",
        )
        parser.add_argument(
            "--max-sleep",
            type=float,
            default=app_settings.MAX_SLEEP_SECONDS,
            help="Longest sleep between turns in seconds (default %(default)s)",
        )
        parser.add_argument(
            "--alive-file",
            type=Path,
            default=None,
            help="Touch this file after every turn that completes (for a health check: "
            "a stale file means a frozen or failing beat)",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="Serve this beat's Prometheus metrics on this port (/metrics)",
        )
        parser.add_argument(
            "--metrics-address",
            default=app_settings.METRICS_ADDRESS,
            help="Address the metrics port listens on (default %(default)s)",
        )

    def handle(
        self,
        *args,
        once: bool,
        batch_size: int,
        max_sleep: float,
        alive_file: Path | None,
        metrics_port: int | None,
        metrics_address: str,
        **options,
    ) -> None:
        if batch_size < 1:
            self.stderr.write("runbeat: --batch-size must be at least 1")
            raise SystemExit(2)
        if max_sleep <= 0:
            self.stderr.write("runbeat: --max-sleep must be positive")
            raise SystemExit(2)
        require_tables()  # a missing table is no outage to wait out
        self.stop = threading.Event()
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        _, grace = dispatch.beat_settings()
        waker = Waker(self.stop)
        observer = BeatObserver(max_sleep=max_sleep, metrics_port=metrics_port, metrics_address=metrics_address)
        waker._listener()  # LISTEN before the first turn: a job changed during it must wake the first sleep
        pruner = retention.Pruner()
        upkeep = [job_vacuum(), ledger_analyze()]
        next_sweep = 0.0
        if not once:
            alerts.start_deliverer()  # alerts are sent on their own thread: a slow receiver never stalls a turn
        # InterfaceError ("the connection is closed") is not a DatabaseError: a connection that
        # died with its server (a failover) raises it.
        transient = (DatabaseError, InterfaceError, *broker_errors())  # e.g. redis.ConnectionError, amqp's errors
        # Time-data changes (services/impact.py): a report, on a thread of its own, so that the
        # first turn never waits for it (the check reads up to CRONFLEET_TIME_DATA_STARTUP_JOBS jobs).
        checker = threading.Thread(target=check_time_data, name="time-data-check", daemon=True)
        checker.start()
        observer.say(self.stdout, f"runbeat: started (batch {batch_size}, max sleep {max_sleep}s, {connection.vendor})")
        try:
            while not self.stop.is_set():
                close_old_connections()
                reset_queries()  # with DEBUG on, Django keeps every query's SQL: bound the beat's memory
                sweep = time.monotonic() >= next_sweep
                began = time.monotonic()
                try:
                    turn = dispatch.run_turn(db_now(), batch_size=batch_size, grace=grace, sweep=sweep)
                    alerts.on_beat_turn()  # job alerts: at most every CRONFLEET_ALERT_CHECK_SECONDS
                    took = time.monotonic() - began
                    # Retention: a bounded batch of old runs deleted when the turn leaves time (at
                    # least every CRONFLEET_RETENTION_BUSY_SECONDS); more to delete: no sleep.
                    pruning = pruner.step(idle=not turn.busy)
                    pause = (
                        None
                        if turn.busy or pruning
                        else dispatch.seconds_until_due(db_now(), cap=max_sleep, held_back=turn.held_back)
                    )
                except transient as exc:
                    # The database or broker went away mid-turn (or right after it). A turn that
                    # did not commit changed nothing; runs that committed but were not published
                    # stay queued in the ledger. Start again on a fresh connection.
                    logger.warning("beat turn failed: %s: %s; retrying in %ss", type(exc).__name__, exc, RETRY_PAUSE)
                    connection.close()
                    waker.sleep(RETRY_PAUSE)
                    continue
                observer.turn(turn, took)
                for step in upkeep:  # VACUUM of the jobs, ANALYZE of the ledger: on threads of their own, now and then
                    step.note(turn.claimed)
                if sweep:
                    next_sweep = time.monotonic() + SWEEP_EVERY
                if alive_file is not None:
                    alive_file.touch()
                if turn.claimed or turn.requeued or turn.lost or turn.republished or turn.released:
                    logger.info(
                        "beat turn: claimed %s jobs, published %s runs, skipped %s fires, held %s over "
                        "quota, released %s, requeued %s retries, %s lost, %s republished",
                        turn.claimed,
                        turn.published,
                        turn.skipped,
                        turn.held,
                        turn.released,
                        turn.requeued,
                        turn.lost,
                        turn.republished,
                    )
                if once:
                    break
                if pause is not None:
                    waker.sleep(pause)
        finally:
            checker.join(timeout=DELIVERER_STOP_SECONDS)  # its connection closes with it
            alerts.stop_deliverer(timeout=DELIVERER_STOP_SECONDS)
            for step in upkeep:
                step.wait(timeout=DELIVERER_STOP_SECONDS)  # a VACUUM under way finishes on its own anyway
            waker.close()
            observer.stop()
        observer.say(self.stdout, "runbeat: stopped")

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        logger.info("%s: finishing the current turn", signal.strsignal(signum))
        self.stop.set()


def check_time_data() -> None:
    """The start-up time-data check, on its own thread and database connection."""
    try:
        startup_check()
    except Exception:
        # A report, not a step of the beat: whatever stops it must not stop the beat.
        logger.exception("time data: the start-up check failed; the beat goes on without it")
    finally:
        connection.close()
