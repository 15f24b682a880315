"""What a Celery worker's main process adds to the worker: its node row and heartbeat, and
with `--metrics-port` (an option of `celery worker`) its metrics exporter.

install_worker_step(app) adds a bootstep to the worker blueprint; project/celery.py calls it
when the app is made, before the command line is read. This module imports nothing of
Django or the project at import time (the app is made before Django is set up); the step
imports what it needs when the worker starts.
"""

from __future__ import annotations

import logging

import click
from celery import bootsteps
from celery.signals import after_setup_logger, after_setup_task_logger

from scheduler_app import logformat

logger = logging.getLogger("scheduler_app.worker")


def install_worker_step(app) -> None:
    app.user_options["worker"].add(click.Option(
        ["--metrics-port"], type=int, default=None,
        help="Serve the worker's Prometheus metrics (all its pool processes: a prefork pool needs "
             "PROMETHEUS_MULTIPROC_DIR) on this port."))
    app.user_options["worker"].add(click.Option(
        ["--metrics-address"], default=None, help="Address of --metrics-port (default CRONFLEET_METRICS_ADDRESS)."))
    app.steps["worker"].add(ObserveWorker)
    after_setup_logger.connect(logformat.use_json_in_celery, weak=False)
    after_setup_task_logger.connect(logformat.use_json_in_celery, weak=False)
    if logformat.json_wanted():
        logformat.use_json_in_celery_worker()


class ObserveWorker(bootsteps.StartStopStep):
    """Registers the worker as a node (kind worker, its Celery node name and queues) and
    heartbeats it from a thread of the main process (nodes.HeartbeatThread); serves the
    metrics of the worker's processes when asked to."""

    label = "cronfleet-observe"

    def __init__(self, parent, metrics_port: int | None = None, metrics_address: str | None = None,
                 **options) -> None:
        super().__init__(parent, **options)
        self.heartbeat = None
        logformat.set_node(parent.hostname)
        if logformat.json_wanted():
            parent.quiet = True  # no banner: every line on stdout and stderr is JSON
        self.metrics_port, self.metrics_address = metrics_port, metrics_address

    def start(self, parent) -> None:
        from django.conf import settings

        from scheduler_app import metrics, nodes

        if self.metrics_port:
            if metrics.MULTIPROC_DIR:  # files of processes gone since the last start: their totals start again
                metrics.forget_dead_processes(metrics.MULTIPROC_DIR, counters=True)
            forked = "prefork" in getattr(parent.pool_cls, "__module__", "")
            metrics.serve(self.metrics_port, self.metrics_address or settings.CRONFLEET_METRICS_ADDRESS,
                          forked=forked)

        queues = sorted(parent.app.amqp.queues.consume_from or parent.app.amqp.queues)
        registration = nodes.Registration(nodes.NodeKind.WORKER, parent.hostname,
                                          stale_after=nodes.WORKER_STALE_AFTER_SECONDS, queues=queues)
        self.heartbeat = nodes.HeartbeatThread(registration, worker_activity)
        self.heartbeat.start()

    def stop(self, parent) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None

    shutdown = stop


def worker_activity() -> str:
    """What the worker is doing, from the main process's own bookkeeping (no query)."""
    from celery.worker import state

    active = len(state.active_requests)
    done = sum(state.total_count.values())
    return f"{active} running, {done} done" if active else f"idle, {done} done"
