"""Celery entry points. Ids in; the work lives in worker/execution.py.

Task names are explicit strings: renaming a function must not orphan queued messages.
"""

import time

from celery import shared_task
from celery.signals import task_postrun
from django.db import connections

from scheduler_app.fire import current_fire
from scheduler_app.queues import EXECUTE_HTTP_RUNS
from scheduler_app.worker import delivery, execution, flight
from scheduler_app.worker.results import DatabaseUnreachable, ledger_reachable

MAX_SLEEP_SECONDS = 3600
EXPECTED = (delivery.RunFailed, DatabaseUnreachable)  # logged by Celery in one line, shown as FAILURE
# On the tasks themselves, not the host's Celery settings, so the host's own tasks keep theirs:
# a message is acknowledged after its run (acks_late), handed back when its worker process dies
# (reject_on_worker_lost: the run row decides whether it runs again), and acknowledged when a
# run failed (the beat retries from the run row, never a redelivery).
RUN_TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "acks_on_failure_or_timeout": True,
    "ignore_result": True,
    "throws": EXPECTED,
    "store_errors_even_if_ignored": True,
    "serializer": "json",
}


# A failed attempt raises delivery.RunFailed (expected: logged without a traceback) so that
# Celery and Flower show it as FAILURE; only failures reach the result backend.
# A lost database raises results.DatabaseUnreachable, expected too: one line, no traceback.
@shared_task(name="scheduler_app.execute_run", bind=True, **RUN_TASK_OPTIONS)
def execute_run(self, run_id: int, attempt: int) -> str:
    with ledger_reachable(f"run {run_id} attempt {attempt}"):
        outcome = execution.execute_run(
            run_id, attempt, worker=self.request.hostname or "unknown", task_id=self.request.id or ""
        )
    return delivery.report(self, outcome)


@task_postrun.connect
def drop_broken_connections(**kwargs) -> None:
    """Workers keep their database connection from task to task (CELERY_DB_REUSE_MAX: a
    connection per run cost a quarter of a worker's time). One that saw an error (a
    database restart) is checked, and closed if it no longer works, so the next task
    connects afresh; a healthy one costs nothing here. One the server closed while it
    sat idle saw no error: the next start catches it (worker/reconnect.py)."""
    for conn in connections.all(initialized_only=True):
        if conn.errors_occurred:
            conn.close_if_unusable_or_obsolete()


@shared_task(name="scheduler_app.execute_runs", bind=True, **RUN_TASK_OPTIONS)
def execute_runs(self, runs: list[list[int]]) -> list[str]:
    """A batch of short runs, [[run id, attempt], ...], run in turn by this process."""
    with ledger_reachable(f"a batch of {len(runs)} runs"):
        outcomes = execution.execute_runs(
            [(run_id, attempt) for run_id, attempt in runs],
            worker=self.request.hostname or "unknown",
            task_id=self.request.id or "",
        )
    return delivery.report_batch(self, outcomes)


@shared_task(name=EXECUTE_HTTP_RUNS, bind=True, **RUN_TASK_OPTIONS)
def execute_http_runs(self, runs: list[list[int]]) -> list[str] | str:
    """HTTP runs, [[run id, attempt], ...], put in flight together (worker/flight.py): the
    task is done when they are started; each run's outcome is written on its row."""
    pairs = [(run_id, attempt) for run_id, attempt in runs]
    worker, task_id = self.request.hostname or "unknown", self.request.id or ""
    with ledger_reachable(f"{len(runs)} HTTP runs"):
        if not flight.Flight.enabled():
            return delivery.report_batch(self, execution.execute_runs(pairs, worker=worker, task_id=task_id))
        handed = flight.FLIGHT.submit(
            pairs, worker=worker, task_id=task_id, queue=delivery.delivery_queue(self.request)
        )
        others = execution.run_in_turn(handed.others, since=time.monotonic()) if handed.others else {}
    return delivery.report_handed(self, handed.in_flight, handed.duplicates, list(others.values()))


@shared_task(name="scheduler_app.echo")
def echo(*args, **kwargs) -> dict:
    """A harmless target for demos and smoke tests: returns what it was given and its fire."""
    fire = current_fire()
    return {
        "args": list(args),
        "kwargs": kwargs,
        "fire_key": fire.fire_key if fire else None,
        "attempt": fire.attempt if fire else None,
        "scheduled_at": fire.scheduled_at.isoformat() if fire else None,
        # a chained run (docs/chains.md): the fire of the run whose end started it
        **(
            {"parent_fire_key": fire.parent_fire_key, "parent_run_id": fire.parent_run_id}
            if fire and fire.parent_run_id
            else {}
        ),
    }


@shared_task(name="scheduler_app.fail")
def fail(message: str = "scheduler_app.fail always fails") -> None:
    """A target that always raises: shows retries, backoff and dead runs."""
    raise RuntimeError(message)


@shared_task(name="scheduler_app.sleep")
def sleep(seconds: float = 1.0) -> float:
    """A target that takes a while (bounded), for timeouts and long runs."""
    seconds = max(0.0, min(float(seconds), MAX_SLEEP_SECONDS))
    time.sleep(seconds)
    return seconds
