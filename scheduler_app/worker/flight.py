"""HTTP runs in flight: many attempts per worker process, on an event loop.

A pool process that calls one URL at a time spends its life waiting for the receiver. Here
each pool process keeps up to CRONFLEET_HTTP_IN_FLIGHT attempts in flight with two threads
of its own, whatever the pool and its concurrency:

- the task (tasks.execute_http_runs, a group of up to CRONFLEET_RUN_BATCH_SIZE runs the beat
  put in one message) calls submit(): it waits while the process already holds its fill of
  attempts, hands the group to the database thread, and returns once the group's start has
  committed. Celery then acknowledges the message: from there on each run's lease covers it
  (a worker killed with attempts in flight costs them one lease, and a beat retries them as
  their next attempt, with the same fire key as `webhook-id`);
- the database thread, this process's one connection for HTTP runs: it starts each group
  in one statement (the compare-and-set of every run's attempt, as for any run), reads the
  tenants' signing secrets and prepares each attempt's Call, writes the outcomes in groups
  (every FLUSH_SECONDS or FLUSH_RUNS outcomes, by the same fenced end statement), and renews
  the leases of the runs in flight (one statement a heartbeat);
- the event loop thread: each attempt waits for a slot (hostslots.FairSlots: the process's
  cap and its host's fair share), checks that its lease is still held (leases.holds: a
  worker cut off from the database calls no target its successor may already have
  called), is signed at that moment and sent by http/aclient.py within its
  deadline, counted from its start, and its outcome goes back to the database thread.

What each run keeps is what it has when called in turn: its own row and attempt, the start
and end compare-and-sets, its lease, the whole-attempt deadline, the response-size bound,
the signature, the retry classes of the HTTP target's answer(), the recorded status, latency and body.
Celery shows the group's task as done when it is in flight; each run's outcome is on its
row and in the metrics. Runs of other kinds in a group (a job edited since it was queued)
are handed back to the task, which runs them in turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import os
import queue
import threading
import time
from collections import Counter as Tally
from dataclasses import dataclass, field

from celery.signals import worker_process_shutdown
from django.db import DatabaseError, connection
from django.utils import timezone

from scheduler_app.conf import app_settings
from scheduler_app.http import aclient, guard
from scheduler_app.http.call import Call
from scheduler_app.http.client import HttpTimeout
from scheduler_app.http.secrets import tenant_signing_secrets
from scheduler_app.observability import metrics
from scheduler_app.targets import RetryableFailure
from scheduler_app.targets.http import answer, failure_of, prepare
from scheduler_app.worker import execution
from scheduler_app.worker.execution import Outcome
from scheduler_app.worker.hostslots import FairSlots
from scheduler_app.worker.leases import LEASES
from scheduler_app.worker.transitions import Started

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.1  # outcomes wait at most this long to be written, in one statement
FLUSH_RUNS = 500  # or until this many are waiting
TICK_SECONDS = 0.5  # how often the database thread looks for leases due a renewal
SHUTDOWN_SECONDS = 60  # the most a stopping pool process waits for its attempts to end
GAUGE_SECONDS = 0.1  # cronfleet_http_in_flight follows the attempts being sent at most this late


@dataclass
class Handed:
    """What submit() did with a group: the runs put in flight, the duplicate deliveries
    (already counted and audited), and the started runs of other kinds, for the caller."""

    in_flight: int
    duplicates: list[Outcome]
    others: list[Started]


@dataclass
class _Group:
    pairs: list[tuple[int, int]]
    worker: str
    task_id: str
    queue: str
    done: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


@dataclass
class _Attempt:
    started: Started
    call: Call
    deadline: float  # time.monotonic(): the start plus the job's timeout
    queue: str
    origin: float = 0.0  # time.monotonic() when the group's start returned


@dataclass
class _Finished:
    attempt: _Attempt
    result: object = None
    exc: BaseException | None = None
    seconds: float | None = None
    waited: float = 0.0  # from the group's start to this attempt's call (its wait for a slot)
    answered: str = ""  # how the attempt ended, for cronfleet_http_responses ("": refused before any traffic)


class Flight:
    def __init__(self) -> None:
        self._pid = 0
        self._room = threading.Condition()
        self._pending = 0  # runs handed over and not yet ended, in this process
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()  # _Group and _Finished, for the database thread
        # The event loop thread's: set before _ensure_started lets anything use them.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: FairSlots | None = None
        self._session: aclient.Pool | None = None
        self._tasks: set[asyncio.Task] = set()
        self._sending = 0  # attempts being sent or answered now (the loop's count)
        self._gauge_planned = False  # an update of cronfleet_http_in_flight is planned on the loop

    @staticmethod
    def enabled() -> bool:
        """On PostgreSQL with CRONFLEET_HTTP_IN_FLIGHT > 0; SQLite's single writer (the embedded
        first run) takes HTTP runs in turn."""
        return app_settings.HTTP_IN_FLIGHT > 0 and connection.vendor == "postgresql"

    def pending(self) -> int:
        with self._room:
            return self._pending

    def submit(self, pairs: list[tuple[int, int]], *, worker: str, task_id: str = "", queue: str = "") -> Handed:
        """Put these runs (run id, attempt) in flight; return once their start committed."""
        self._ensure_started()
        limit = max(2 * app_settings.HTTP_IN_FLIGHT, app_settings.RUN_BATCH_SIZE)
        with self._room:
            # Room for one more group: the slots' cap plus as many again waiting for a slot
            # (their host's share taken), so a hanging host's runs cannot stop the others'.
            self._room.wait_for(lambda: self._pending < limit)
            self._pending += len(pairs)
        group = _Group(pairs, worker, task_id, queue)
        self._inbox.put(group)
        return group.done.result()

    def drain(self, timeout: float) -> bool:
        """Wait (at most `timeout` seconds) until every run handed over has ended and been written."""
        with self._room:
            return self._room.wait_for(lambda: self._pending == 0, timeout=timeout)

    def _release(self, count: int) -> None:
        if count:
            with self._room:
                self._pending -= count
                self._room.notify_all()

    # -- start-up (once per process: a forked pool process inherits the object, not the threads)

    def _ensure_started(self) -> None:
        if self._pid == os.getpid():
            return
        with self._room:
            if self._pid == os.getpid():
                return
            self._pending = 0
            self._inbox = queue.SimpleQueue()
            # What the process has loaded by now (Django, Celery, the project) lives as long
            # as it does: out of the collector's sight, a full collection no longer walks
            # it, which thousands of attempts' short-lived objects trigger often.
            gc.freeze()
            ready = threading.Event()
            threading.Thread(target=self._loop_forever, args=(ready,), name="cronfleet-http-loop", daemon=True).start()
            ready.wait()
            threading.Thread(target=self._db_forever, name="cronfleet-http-db", daemon=True).start()
            self._pid = os.getpid()

    def _loop_forever(self, ready: threading.Event) -> None:
        loop = aclient.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        total = app_settings.HTTP_IN_FLIGHT
        self._slots = FairSlots(total, app_settings.HTTP_IN_FLIGHT_PER_HOST, on_change=self._show_slots)

        async def open_session():
            self._session = aclient.session(connections=total)

        loop.run_until_complete(open_session())
        ready.set()
        loop.run_forever()

    # -- the database thread

    def _db_forever(self) -> None:
        finished: list[_Finished] = []
        flush_at = renew_at = 0.0
        while True:  # as long as the process: the thread is a daemon
            wait = TICK_SECONDS if not finished else max(0.0, flush_at - time.monotonic())
            try:
                item = self._inbox.get(timeout=wait)
            except queue.Empty:
                item = None
                if not finished and not self.pending():
                    connection.close()  # hold no database connection while nothing is in flight
            if isinstance(item, _Group):
                self._start(item, finished)
            elif isinstance(item, _Finished):
                if not finished:
                    flush_at = time.monotonic() + FLUSH_SECONDS
                finished.append(item)
            now = time.monotonic()
            if finished and (len(finished) >= FLUSH_RUNS or now >= flush_at):
                if self._end(finished):
                    finished = []
                else:
                    flush_at = now + TICK_SECONDS  # the database is away: the same outcomes again soon
            if now >= renew_at:
                renew_at = now + TICK_SECONDS
                try:
                    LEASES.renew_due()
                except Exception:  # noqa: BLE001 - this thread must outlive any one failure
                    logger.exception("renewing the leases of HTTP runs in flight failed")

    def _start(self, group: _Group, finished: list[_Finished]) -> None:
        try:
            self._start_group(group, finished)
        except BaseException as exc:  # noqa: BLE001 - the waiting task raises it; this thread goes on
            logger.exception("putting %s HTTP runs in flight failed", len(group.pairs))
            if not group.done.done():
                group.done.set_exception(exc)

    def _start_group(self, group: _Group, finished: list[_Finished]) -> None:
        sent = time.monotonic()  # the leases run from the start statement
        try:
            started = execution.start_runs(group.pairs, worker=group.worker, task_id=group.task_id)
            origin = time.monotonic()  # the runs' started_at, as near as this clock can tell
            won = {s.run.id for s in started}
            duplicates = execution.record_duplicates([p for p in group.pairs if p[0] not in won], worker=group.worker)
        except BaseException as exc:  # noqa: BLE001 - the task raises it (the runs stay queued: republished)
            self._release(len(group.pairs))
            _drop_broken_connection()
            group.done.set_exception(exc)
            return
        ours = [s for s in started if s.job.target_kind == "http"]
        others = [s for s in started if s.job.target_kind != "http"]
        self._release(len(group.pairs) - len(ours))
        LEASES.hold({s.run.id: s.run.attempt for s in ours}, since=sent)
        attempts = []
        for run, prepared in zip(ours, self._prepare(ours), strict=True):
            if isinstance(prepared, Call):
                attempts.append(_Attempt(run, prepared, sent + prepared.timeout, group.queue, origin))
            else:  # refused before any traffic (a URL the guard refuses, a secret that cannot be read)
                # An attempt with no Call, against its type: _end reads only its started and queue.
                finished.append(_Finished(_Attempt(run, None, 0.0, group.queue), exc=prepared))  # type: ignore[arg-type]
        if attempts:
            assert self._loop is not None  # this thread starts once the loop is made
            self._loop.call_soon_threadsafe(self._launch, attempts)
        group.done.set_result(Handed(len(ours), list(duplicates.values()), others))

    @staticmethod
    def _prepare(runs: list[Started]) -> list[Call | BaseException]:
        """Each run's Call, reading each tenant's secrets once (their columns came with the
        start, on run.job.tenant); or why it cannot be made."""
        secrets: dict[int, list[str] | BaseException] = {}
        prepared: list[Call | BaseException] = []
        for run in runs:
            tenant_id = run.run.tenant_id
            if tenant_id not in secrets:
                try:
                    secrets[tenant_id] = tenant_signing_secrets(run.job.tenant, run.now)
                except Exception as exc:  # noqa: BLE001 - recorded on each of the tenant's runs
                    secrets[tenant_id] = exc
            secret = secrets[tenant_id]
            try:
                if isinstance(secret, BaseException):
                    raise secret
                prepared.append(prepare(run.run, run.job, run.now, secret))
            except Exception as exc:  # noqa: BLE001 - the run's outcome
                prepared.append(exc)
        return prepared

    def _end(self, finished: list[_Finished]) -> bool:
        """Write these outcomes in one statement; False (kept for another try) when the
        database did not answer."""
        try:
            endings = [execution.ending(f.attempt.started, f.result, f.exc, waited=f.waited) for f in finished]
            outcomes = execution.write_endings(endings)
        except DatabaseError as exc:
            logger.warning("could not write %s HTTP runs' outcomes (%s); trying again", len(finished), exc)
            _drop_broken_connection()
            return False
        except Exception:  # noqa: BLE001 - a bug must not stop every later outcome: these are dropped, retried by lease
            logger.exception(
                "writing %s HTTP runs' outcomes failed; they are retried when their lease runs out", len(finished)
            )
            LEASES.release([f.attempt.started.run.id for f in finished])
            _count_responses(finished)
            self._release(len(finished))
            return True
        by_queue: dict[str, list] = {}
        for f in finished:
            run = f.attempt.started
            written = outcomes[run.run.id]
            by_queue.setdefault(f.attempt.queue, []).append(Outcome(written.state, written.detail, run, f.seconds))
        for queue_label, ended in by_queue.items():
            metrics.observe_deliveries(ended, queue_label, tenant_labels=app_settings.METRICS_TENANT_LABELS)
        _count_responses(finished)
        self._release(len(finished))
        return True

    # -- the event loop thread

    def _launch(self, attempts: list[_Attempt]) -> None:
        assert self._loop is not None  # this runs on it
        for attempt in attempts:
            task = self._loop.create_task(self._attempt(attempt))
            self._tasks.add(task)  # the loop keeps only weak references to its tasks
            task.add_done_callback(self._tasks.discard)

    async def _attempt(self, attempt: _Attempt) -> None:
        began = time.monotonic()
        call, slots = attempt.call, self._slots
        assert slots is not None  # made with the loop this runs on
        outcome = _Finished(attempt)
        answered = "error"  # how it ended, for cronfleet_http_responses
        try:
            await self._take_slot(attempt)
            outcome.waited = max(0.0, time.monotonic() - attempt.origin)  # recorded as its own start
            try:
                response = await self._send(attempt)
            finally:
                slots.release(call.host)
            answered = f"{response.status // 100}xx"
            outcome.result = answer(call, response, timezone.now)
        except Exception as exc:  # noqa: BLE001 - every failure is the run's outcome
            answered = _failure_class(exc) if answered == "error" else answered
            outcome.exc = failure_of(call, exc)
        outcome.seconds = time.monotonic() - began
        outcome.answered = answered  # counted with its outcome, in _end
        self._inbox.put(outcome)

    async def _take_slot(self, attempt: _Attempt) -> None:
        call, slots = attempt.call, self._slots
        assert slots is not None  # made with the loop this runs on
        if slots.try_take(call.host):  # most of the time: no wait, no timer, nothing to count
            return
        metrics.HTTP_WAITING.inc()
        try:
            async with asyncio.timeout(max(0.0, attempt.deadline - time.monotonic())):
                await slots.acquire(call.host)
        except TimeoutError:
            raise NoSlot(
                f"timeout: no slot for {call.host[1]} within {call.timeout:g}s "
                f"({slots.in_flight.get(call.host, 0)} attempts in flight to it)"
            ) from None
        finally:
            metrics.HTTP_WAITING.dec()

    async def _send(self, attempt: _Attempt):
        """The answer to this attempt, signed and sent now, if its lease still holds."""
        call = attempt.call
        if not LEASES.holds(call.run_id):
            raise execution.LeaseUnconfirmed()
        assert self._session is not None  # opened on the loop before it took any work
        self._sending += 1
        self._show_sending()
        try:
            return await aclient.request(
                self._session, call, signed_headers=call.signed_headers(time.time()), deadline=attempt.deadline
            )
        finally:
            self._sending -= 1
            self._show_sending()

    def _show_sending(self) -> None:
        """Plan cronfleet_http_in_flight's update, GAUGE_SECONDS from the first change since
        the last one: a multiprocess gauge's write takes a lock and checks the pid, and an
        increment and a decrement per attempt cost the loop more than signing it."""
        if self._gauge_planned:
            return
        assert self._loop is not None  # this runs on it
        self._gauge_planned = True
        self._loop.call_later(GAUGE_SECONDS, self._set_sending)

    def _set_sending(self) -> None:
        self._gauge_planned = False
        metrics.HTTP_IN_FLIGHT.set(self._sending)

    def _show_slots(self) -> None:
        """FairSlots' on_change: a host started or stopped waiting."""
        assert self._slots is not None  # the FairSlots calling
        metrics.HTTP_HOSTS_SATURATED.set(self._slots.saturated_hosts())


class NoSlot(RetryableFailure):
    """The attempt's deadline came while it waited for a slot: a timeout, retried."""


def _count_responses(finished: list[_Finished]) -> None:
    """cronfleet_http_responses: one increment per way of ending, for the lot."""
    for answered, count in Tally(f.answered for f in finished if f.answered).items():
        metrics.HTTP_RESPONSES.labels(answered).inc(count)


def _failure_class(exc: BaseException) -> str:
    """How an attempt that got no answer ended, for cronfleet_http_responses."""
    if isinstance(exc, (HttpTimeout, NoSlot)):
        return "timeout"
    if isinstance(exc, guard.BlockedTarget):
        return "blocked"
    if isinstance(exc, execution.LeaseUnconfirmed):
        return "not_called"
    return "connection_error"


def _drop_broken_connection() -> None:
    try:
        connection.close()  # this thread's own: a fresh one next time
    except DatabaseError:
        pass


FLIGHT = Flight()


@worker_process_shutdown.connect
def _finish_in_flight(**kwargs) -> None:
    """A pool process that stops (warm shutdown) first lets its attempts end and be written,
    within their deadlines (at most SHUTDOWN_SECONDS): those left over are retried after
    their lease, as a killed worker's are."""
    if FLIGHT._pid == os.getpid() and FLIGHT.pending():
        logger.info("waiting for %s HTTP runs in flight before this process stops", FLIGHT.pending())
        if not FLIGHT.drain(SHUTDOWN_SECONDS):
            logger.warning("%s HTTP runs still in flight at shutdown: retried after their lease", FLIGHT.pending())
