"""What a worker reports about each delivery of execute_run, after the run row says what
happened: its metrics (in-process counters, no query), and the task's state as Celery and
Flower see it.

The run row is the truth and is written before anything here runs; nothing here writes it.
execution.execute_run returns an outcome instead of raising, so Celery used to report every
delivery as SUCCESS. report() tells the truth instead:

- succeeded: SUCCESS;
- failed, retrying, dead, or stale (this attempt's write was refused): RunFailed is raised,
  so the task is FAILURE (task-failed event; the failure is stored in the result backend,
  which keeps nothing for a success). Raising cannot make Celery run it again: the task has
  no autoretry, acks_late with task_acks_on_failure_or_timeout acknowledges a failed
  message (settings say so), and reject_on_worker_lost only requeues when the pool process
  dies. Retries stay the beat's, from the run row;
- a duplicate delivery: Ignore (acknowledged, nothing stored, no failure counted), after a
  `task-duplicate` event of its own (announce_duplicate).
"""

from __future__ import annotations

import logging
import uuid

from celery import current_app
from celery.exceptions import Ignore
from celery.signals import task_postrun, task_prerun, worker_process_init
from kombu.exceptions import KombuError

from scheduler_app.conf import app_settings
from scheduler_app.observability import logformat, metrics
from scheduler_app.queues import EXECUTE_HTTP_RUNS, EXECUTE_RUN, EXECUTE_RUNS
from scheduler_app.worker.execution import Outcome

logger = logging.getLogger(__name__)
RUN_TASKS = (EXECUTE_RUN, EXECUTE_RUNS, EXECUTE_HTTP_RUNS)
FAILURES = ("failed", "retrying", "dead", "stale")
STALE = "this attempt no longer owns the run (taken as lost, cancelled or replayed): its outcome was refused"


class RunFailed(Exception):
    """This attempt of the run did not succeed (recorded on the run before this is raised)."""


def delivery_queue(request) -> str:
    """The broker queue a message came from (the beat publishes with the queue as routing key)."""
    info = getattr(request, "delivery_info", None) or {}
    return metrics.queue_label(info.get("routing_key") or "")


def report(task, outcome: Outcome) -> str:
    """Count the delivery; return what the task returns, or raise what Celery should see."""
    metrics.observe_deliveries(
        [outcome], delivery_queue(task.request), tenant_labels=app_settings.METRICS_TENANT_LABELS
    )
    run_id, attempt = (list(task.request.args or ()) + [None, None])[:2]
    if outcome.state == "duplicate":
        announce_duplicate(task, run_id, attempt, outcome.detail)
        raise Ignore()
    if outcome.state in FAILURES:
        detail = outcome.detail or (STALE if outcome.state == "stale" else "")
        called = called_task(outcome)
        raise RunFailed(f"run {run_id} attempt {attempt} {outcome.state}: {detail}"[: 1000 - len(called)] + called)
    return outcome.state


def called_task(outcome: Outcome) -> str:
    """' (task billing.extract)' for a task job's run: the message names the job (its shadow
    name) and the run, but the task it called only here, in the worker's failure line and in
    Flower's exception column; '' for other targets."""
    job = outcome.started.job if outcome.started is not None else None
    return f" (task {job.task_name})" if job is not None and job.task_name else ""


def report_batch(task, outcomes: list[Outcome]) -> list[str]:
    """report() for a batch: every run is counted; the batch is FAILURE when any of its runs
    did not succeed (each run's own state is on its row), and duplicates are just counted."""
    metrics.observe_deliveries(outcomes, delivery_queue(task.request), tenant_labels=app_settings.METRICS_TENANT_LABELS)
    failed = [outcome for outcome in outcomes if outcome.state in FAILURES]
    if failed:
        states = ", ".join(f"{o.started.run.id if o.started else '?'} {o.state}{called_task(o)}" for o in failed)
        raise RunFailed(f"{len(failed)} of the batch's {len(outcomes)} runs did not succeed: {states}"[:1000])
    return [outcome.state for outcome in outcomes]


def report_handed(task, in_flight: int, duplicates: list[Outcome], others: list[Outcome]) -> str:
    """report_batch() for a group of HTTP runs put in flight (worker/flight.py): the
    duplicates and any runs of other kinds run in turn are counted here; the runs in flight
    are counted as they end. The task succeeds when its runs are in flight."""
    report_batch(task, duplicates + others)
    return f"{in_flight} HTTP runs in flight, {len(duplicates)} duplicate deliveries"


@worker_process_init.connect
def _pool_process_begins(**kwargs) -> None:
    """Each pool process keeps its own counts (metrics.py): its series start at 0 too."""
    metrics.initialise_worker(current_app.amqp.queues.consume_from or current_app.amqp.queues)


@task_prerun.connect
def _delivery_begins(sender=None, **kwargs) -> None:
    if getattr(sender, "name", None) in RUN_TASKS:
        metrics.IN_PROGRESS.labels(delivery_queue(sender.request)).inc()
        logformat.bind_delivery(sender.request)


@task_postrun.connect
def _delivery_ends(sender=None, **kwargs) -> None:
    if getattr(sender, "name", None) in RUN_TASKS:
        metrics.IN_PROGRESS.labels(delivery_queue(sender.request)).dec()
        logformat.clear()


def announce_duplicate(task, run_id, attempt, detail: str) -> None:
    """Send a `task-duplicate` event for this delivery, under an id of its own.

    A duplicate carries its run's task id (one per attempt), so its own events would merge
    into the task of the delivery that ran, whose SUCCESS or FAILURE outranks anything a
    duplicate could say. Under `<task id>.duplicate.<n>` Flower lists it as a task of its
    own, named after the job, in the state DUPLICATE, its result naming the task it repeated.
    """
    if not task.app.conf.worker_send_task_events:
        return
    request = task.request
    try:
        with task.app.events.default_dispatcher(hostname=request.hostname) as dispatcher:
            # Flower shows a task's known fields only: what happened goes in `result`.
            dispatcher.send(
                "task-duplicate",
                uuid=f"{request.id}.duplicate.{uuid.uuid4().hex[:8]}",
                name=getattr(request, "shadow", None) or task.name,
                args=repr([run_id, attempt]),
                result=f"duplicate delivery of {request.id}, not executed: {detail}",
            )
    except (KombuError, OSError) as exc:  # a monitoring event: never worth failing the delivery for
        logger.warning("could not announce the duplicate delivery of run %s: %s", run_id, exc)
