"""What a worker reports about each delivery of execute_run, after the run row says what
happened: its metrics (in-process counters, no query).

The run row is the truth and is written before anything here runs; nothing here writes it.
"""

from __future__ import annotations

from celery.signals import task_postrun, task_prerun
from django.conf import settings

from scheduler_app import metrics
from scheduler_app.execution import Outcome

EXECUTE_RUN = "scheduler_app.execute_run"


def delivery_queue(request) -> str:
    """The broker queue a message came from (the beat publishes with the queue as routing key)."""
    info = getattr(request, "delivery_info", None) or {}
    return metrics.queue_label(info.get("routing_key") or "")


def report(task, outcome: Outcome) -> str:
    """Count the delivery; return what the task returns."""
    metrics.observe_delivery(outcome, delivery_queue(task.request),
                             tenant_labels=settings.CRONFLEET_METRICS_TENANT_LABELS)
    return outcome.state


@task_prerun.connect
def _delivery_begins(sender=None, **kwargs) -> None:
    if getattr(sender, "name", None) == EXECUTE_RUN:
        metrics.IN_PROGRESS.labels(delivery_queue(sender.request)).inc()


@task_postrun.connect
def _delivery_ends(sender=None, **kwargs) -> None:
    if getattr(sender, "name", None) == EXECUTE_RUN:
        metrics.IN_PROGRESS.labels(delivery_queue(sender.request)).dec()
