"""SIGTERM in a prefork pool process: a run in progress ends first.

systemd's default stop (KillMode=control-group), `docker stop` of a container whose init is
not the worker, or `kill -TERM -<pgid>` send SIGTERM to the worker's main process and to
each of its pool processes at once. The main process starts a warm shutdown, which waits for
every task in progress; but billiard gives each pool process a SIGTERM handler of its own
(billiard.common._shutdown_cleanup, installed by reset_signals() after Celery's
process_initializer and its worker_process_init), which raises SystemExit in the task. The
run was cut off, the main process logged WorkerLostError ("exited prematurely: signal 15"),
the message went back to the broker (task_reject_on_worker_lost), and the run was marked lost
after its lease and run again as attempt 2.

Here a pool process puts its own handler in place only while a task runs (task_prerun to
task_postrun, in that process), so each case below keeps its meaning:

- a busy process, SIGTERM from anyone but its main process (the whole group, systemd, a
  person): noted, and the task goes on. When it has returned, billiard's handler is back and
  the process's job pipe reads end-of-file (os.dup2 of /dev/null over its reading end), so
  billiard's workloop, having sent the task's result to the main process and waited for it
  to be counted (_ensure_messages_consumed), ends the process with status 0 at its next
  receive, as when the main process closes the pipe. The run's end is written once, the
  message is acknowledged, nothing is lost. (billiard's `_shutdown` sentinel cannot do this:
  it is an Event Celery's pool does not make, worker_pool_restarts being off; and
  task_postrun itself is too early to exit: the result is not sent yet.)
- a busy process, a second SIGTERM while the first waits: billiard's handler, at once (the
  process stops now, as before; the run is then retried after its lease).
- a busy process told to stop by its main process: revoke(terminate=True), and the cold
  shutdown (SIGQUIT, or a second Ctrl+C), which cancels the tasks in progress and then
  terminates the pool. Every such SIGTERM goes through the pool's terminate_job() or comes
  after this module's step was told to terminate, and the step notes it first in memory the
  pool processes share (ORDERS), so the process obeys it at once, as before.
- an idle process (between tasks, or before its first): billiard's handler, untouched; it
  exits at once. So an autoscale shrink (billiard's shrink() SIGTERMs idle processes only)
  and an idle cold shutdown are as before; the warm shutdown ends idle processes by
  closing their job pipes, as before.
- the hard time limit: billiard's _trywaitkill sends SIGTERM then, 0.1 s later, SIGKILL,
  which no handler delays: the task ends as before (killed).
- a process with HTTP runs in flight (worker/flight.py): those runs live on threads of the
  process, not in a task, and SIGTERM (a Python handler, run by the main thread) never
  stops them; whichever way the process ends, billiard's exit path sends
  worker_process_shutdown, where flight.py lets them end and be written (at most
  flight.SHUTDOWN_SECONDS; those left are retried after their lease).

What remains as before: a SIGTERM in the few instructions between the task's return and its
result being sent still stops the process then (billiard's handler is back by then); the
solo and threads pools run tasks in the main process and are left alone (the warm shutdown
waits for their tasks). systemd's KillMode=mixed (SIGTERM to the main process only) needs
none of this and stays the recommended setting (docs/operating.md,
deploy/systemd/cronfleet-worker.service).

This module imports nothing of Django (step.py imports it when the Celery app is made).
"""

from __future__ import annotations

import logging
import os
import signal
from multiprocessing.sharedctypes import RawArray

from billiard.process import current_process
from celery import bootsteps
from celery.signals import task_postrun, task_prerun, worker_process_init

logger = logging.getLogger("scheduler_app.worker")

ALL = -1  # in ORDERS[0]: the main process terminates its pool, every process obeys at once
SLOTS = 64  # the last pids terminate_job() was called for (ORDERS[1:], in turn)

# Made by the main process before it forks its pool (TerminateInTime.__init__), read by the
# pool processes in their SIGTERM handler: a plain array of ints in shared memory, written
# by one thread of the main process, no lock (a pid either is there or not yet).
ORDERS = None
_next_slot = 0

_pool_pid = 0  # this process's pid once worker_process_init ran here: a prefork pool process
_billiard_handler = None  # the SIGTERM handler the task's time put aside
_deferred = False  # a SIGTERM came while the task ran


def install(app) -> None:
    """Connect the pool processes' signals and add the main process's step (step.py)."""
    app.steps["worker"].add(TerminateInTime)
    worker_process_init.connect(_in_pool_process, weak=False)
    task_prerun.connect(_task_starts, weak=False)
    task_postrun.connect(_task_ended, weak=False)


class TerminateInTime(bootsteps.StartStopStep):
    """In the main process: note each SIGTERM the pool sends a busy process on purpose."""

    label = "cronfleet-sigterm"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent, **options) -> None:
        global ORDERS
        super().__init__(parent, **options)
        if ORDERS is None:
            ORDERS = RawArray("i", 1 + SLOTS)

    def start(self, parent) -> None:
        pool = parent.pool
        terminate_job = getattr(pool, "terminate_job", None)
        if terminate_job is None or getattr(terminate_job, "_cronfleet", False):
            return

        def noted_terminate_job(pid, signal=None):  # revoke(terminate=True), a cold shutdown's cancel
            ordered(pid)
            return terminate_job(pid, signal)

        noted_terminate_job._cronfleet = True  # type: ignore[attr-defined]  # a marker on the function
        pool.terminate_job = noted_terminate_job  # TaskPool.on_start set it, from billiard's pool

    def terminate(self, parent) -> None:
        # Cold shutdown: the steps terminate in reverse order, so this runs before the pool's
        # own step SIGTERMs its processes (billiard's _terminate_pool).
        if ORDERS is not None:
            ORDERS[0] = ALL


def ordered(pid: int) -> None:
    """The main process is about to SIGTERM pool process `pid` on purpose."""
    global _next_slot
    if ORDERS is not None:
        ORDERS[1 + _next_slot] = pid
        _next_slot = (_next_slot + 1) % SLOTS


def _ordered_here() -> bool:
    if ORDERS is None:
        return False
    pid = os.getpid()
    return ORDERS[0] == ALL or any(ORDERS[i] == pid for i in range(1, 1 + SLOTS))


# -- in a pool process ------------------------------------------------------------------


def _in_pool_process(**kwargs) -> None:
    global _pool_pid
    _pool_pid = os.getpid()


def _task_starts(**kwargs) -> None:
    global _billiard_handler, _deferred
    if _pool_pid != os.getpid() or _billiard_handler is not None:
        return  # the main process (solo, threads), or a task called inside a task
    _deferred = False
    _billiard_handler = signal.signal(signal.SIGTERM, _sigterm_during_task)


def _sigterm_during_task(signum, frame) -> None:
    global _deferred
    # Nothing is logged here: a handler runs between two bytecodes of the task, which may be
    # inside the logging module; _task_ended says it.
    if _deferred or _ordered_here():
        _put_back()
        handler = signal.getsignal(signal.SIGTERM)
        if callable(handler):
            handler(signum, frame)  # billiard's: SystemExit, as before
        return
    _deferred = True


def _task_ended(**kwargs) -> None:
    if _pool_pid != os.getpid() or _billiard_handler is None:
        return
    deferred = _deferred
    _put_back()
    if deferred:
        logger.info("SIGTERM during the task: this pool process stops now that the task has ended")
        _end_after_the_result()


def _put_back() -> None:
    global _billiard_handler, _deferred
    if _billiard_handler is not None:
        signal.signal(signal.SIGTERM, _billiard_handler)
    _billiard_handler, _deferred = None, False


def _end_after_the_result() -> None:
    """Make billiard's workloop end this process at its next receive: the job pipe's reading
    end reads end-of-file from now on (an EOFError there is billiard's own way out, status 0)."""
    inq = getattr(current_process(), "inq", None)
    reader = getattr(inq, "_reader", None)
    if reader is None:  # not billiard's pool process after all: stop as SIGTERM would have
        os.kill(os.getpid(), signal.SIGTERM)
        return
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, reader.fileno())
    finally:
        os.close(devnull)
