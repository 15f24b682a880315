"""The Celery application. Configuration lives in Django settings under the CELERY_ prefix."""

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("cronfleet")
# The worker's node heartbeat and metrics exporter (a bootstep, and its command-line option).
from scheduler_app.worker.step import install_worker_step  # noqa: E402 (imports no Django)

install_worker_step(app)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
def log_through_celery(**kwargs) -> None:
    """In a worker, Celery's root handler prints every record (with -l, --logfile and its
    format); the console handler settings.LOGGING gives "scheduler_app" for runbeat and the
    other commands would print each of our lines a second time, so the worker drops it.
    The records still reach the root handler by propagation."""
    logging.getLogger("scheduler_app").handlers.clear()
