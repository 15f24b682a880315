"""What a Celery worker's main process adds to the worker: its node row and heartbeat, and
with `--metrics-port` (an option of `celery worker`) its metrics exporter.

A prefork pool counts in its child processes, so the exporter adds up files in a
multiprocess directory (metrics.py). Without PROMETHEUS_MULTIPROC_DIR, every worker (with
--metrics-port or not) makes a fresh directory of its own when the command line is read,
before anything imports prometheus-client, and removes it when the worker stops: one
exporter per worker, nothing to set up, nothing left from an earlier run. The heartbeat
reads its pool processes' HTTP gauges there (in flight, waiting, hosts saturated) and says
them in the node's activity, for `manage.py status` and the dashboard.

install_worker_step(app) adds a bootstep to the worker blueprint, and shutdown.py's (a pool
process busy with a task when SIGTERM comes finishes the task first), and at worker_init
redisacks.py's guard on kombu's Redis acks (a worker outlives its broker master); project/celery.py
calls it when the app is made, before the command line is read. This module imports nothing of
Django or the project at import time (the app is made before Django is set up); the step
imports what it needs when the worker starts.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

import click
from celery import bootsteps
from celery.signals import after_setup_logger, after_setup_task_logger, worker_init

from scheduler_app.observability import logformat
from scheduler_app.worker import redisacks, shutdown

if TYPE_CHECKING:
    from scheduler_app.observability.nodes import HeartbeatThread

logger = logging.getLogger("scheduler_app.worker")


def install_worker_step(app) -> None:
    app.user_options["worker"].add(
        click.Option(
            ["--metrics-port"],
            type=int,
            default=None,
            callback=_metrics_directory,
            help="Serve the metrics of the worker and its pool processes on this port (added up in "
            "PROMETHEUS_MULTIPROC_DIR, or a directory of the worker's own).",
        )
    )
    app.user_options["worker"].add(
        click.Option(
            ["--metrics-address"], default=None, help="Address of --metrics-port (default CRONFLEET_METRICS_ADDRESS)."
        )
    )
    app.steps["worker"].add(ObserveWorker)
    shutdown.install(app)
    worker_init.connect(redisacks.install, weak=False)  # a lost Redis master must not stop the worker
    after_setup_logger.connect(logformat.use_json_in_celery, weak=False)
    after_setup_task_logger.connect(logformat.use_json_in_celery, weak=False)
    if logformat.json_wanted():
        logformat.use_json_in_celery_worker()


_own_directory = ""


def _metrics_directory(ctx, param, port):
    """--metrics-port's callback, run as the command line is read (with or without the
    option): give the worker a multiprocess directory of its own unless it was given one.
    Without --metrics-port too: the heartbeat reads its pool processes' HTTP gauges there."""
    global _own_directory
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        _own_directory = tempfile.mkdtemp(prefix="cronfleet-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = _own_directory
        if "prometheus_client.values" in sys.modules:
            # Flower's plugin to the celery command imports prometheus-client before the
            # command line is read, which fixes how values are kept from the environment
            # of that moment; ours are made later (metrics.py), and must go to the files.
            from prometheus_client import values

            values.ValueClass = values.get_value_class()
    return port


class ObserveWorker(bootsteps.StartStopStep):
    """Registers the worker as a node (kind worker, its Celery node name and queues) and
    heartbeats it from a thread of the main process (nodes.HeartbeatThread); serves the
    metrics of the worker's processes when asked to."""

    label = "cronfleet-observe"

    def __init__(self, parent, metrics_port: int | None = None, metrics_address: str | None = None, **options) -> None:
        super().__init__(parent, **options)
        self.heartbeat: HeartbeatThread | None = None
        logformat.set_node(parent.hostname)
        if logformat.json_wanted():
            parent.quiet = True  # no banner: every line on stdout and stderr is JSON
        self.metrics_port, self.metrics_address = metrics_port, metrics_address
        consume_cronfleet_queues(parent.app.amqp.queues)

    def start(self, parent) -> None:
        # Imported when the worker starts: this module is imported when the Celery app is
        # made, before Django is set up, and metrics must follow the --metrics-port directory.
        from scheduler_app.conf import app_settings, setting_errors
        from scheduler_app.models import NodeKind
        from scheduler_app.observability import metrics, nodes

        if errors := setting_errors():  # as `manage.py check` says them: a worker does not run checks itself
            from django.core.exceptions import ImproperlyConfigured  # here: beside its only use

            raise ImproperlyConfigured("; ".join(f"{name} {message}" for name, message in errors))
        queues = sorted(parent.app.amqp.queues.consume_from or parent.app.amqp.queues)
        if self.metrics_port:
            if metrics.MULTIPROC_DIR:  # files of processes gone since the last start: their totals start again
                metrics.forget_dead_processes(metrics.MULTIPROC_DIR, counters=True)
            forked = "prefork" in getattr(parent.pool_cls, "__module__", "")
            metrics.initialise_worker(queues)  # a solo or threads pool counts in this process
            metrics.serve(self.metrics_port, self.metrics_address or app_settings.METRICS_ADDRESS, forked=forked)
        registration = nodes.Registration(
            NodeKind.WORKER, parent.hostname, stale_after=nodes.WORKER_STALE_AFTER_SECONDS, queues=queues
        )
        self.heartbeat = nodes.HeartbeatThread(registration, lambda: worker_activity(parent))
        self.heartbeat.start()

    def stop(self, parent) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None
        if _own_directory:
            shutil.rmtree(_own_directory, ignore_errors=True)

    shutdown = stop


def consume_cronfleet_queues(queues) -> None:
    """A worker started without -Q consumes Cronfleet's queue (CRONFLEET_QUEUE) beside its app's
    own default queue, so a host's `celery -A <app> worker` runs Cronfleet's runs as it is; one
    started with -Q consumes what it lists. Either way Cronfleet's queues are declared as the
    beats declare them (queues.task_queue: durable, its priorities, its queue type), not as
    Celery would make a missing queue from the host's settings, which RabbitMQ would refuse
    as a different declaration of the same queue."""
    from scheduler_app.conf import app_settings  # here: the worker has loaded Django's settings by now
    from scheduler_app.queues import task_queue  # here: as above

    listed = queues._consume_from  # None: no -Q (Celery's own attribute: the property hides the difference)
    if listed is None:
        queues.select_add(task_queue(app_settings.QUEUE))
        return
    for name in sorted({app_settings.QUEUE, *app_settings.QUEUES} & set(listed)):
        queues.select_add(task_queue(name))


def worker_activity(worker=None) -> str:
    """What the worker is doing, from the main process's own bookkeeping (no query), and the
    HTTP attempts of its processes (their gauges' files; no query either)."""
    from celery.worker import state  # the worker's own bookkeeping, there only in a worker

    from scheduler_app.observability import metrics, nodes  # after Django is set up, as in start()

    active = len(state.active_requests)
    done = sum(state.total_count.values())
    text = f"{active} running, {done} done" if active else f"idle, {done} done"
    if metrics.MULTIPROC_DIR:
        try:
            flight = nodes.http_flight(metrics.MULTIPROC_DIR, {os.getpid(), *_pool_pids(worker)})
        except (OSError, ValueError) as exc:  # a file going as a process ends: the next heartbeat reads again
            logger.debug("could not read the HTTP gauges: %s", exc)
        else:
            if any(flight.values()):
                text += "; " + nodes.FLIGHT_TEXT.format(**flight)
    return text


def _pool_pids(worker) -> list[int]:
    """The pids of a prefork pool's processes (none for a solo or threads pool, or before the
    pool has started)."""
    try:
        return list(worker.pool.info.get("processes", ()))
    except AttributeError:
        return []
