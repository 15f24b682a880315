"""The Celery application. Configuration lives in Django settings under the CELERY_ prefix."""

import logging
import os
import sys

from celery import Celery
from celery.signals import after_setup_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
# Celery's Django fixup runs every system check as a worker starts and drops what they find;
# their URL checks import the whole URLconf (the API, DRF, drf-spectacular) at every start.
# Cronfleet's checks run with migrate, runbeat and `manage.py check`.
os.environ.setdefault("CELERY_SKIP_CHECKS", "true")


def check_settings(program: str) -> None:
    """Load the settings now, so that a bad or missing variable stops `celery -A project ...`
    with one line naming it (status 2) instead of a traceback at the first task."""
    # Imported here: Django's settings must not load when other programs import this module.
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.INSTALLED_APPS  # noqa: B018 - evaluating it loads the settings module
    except ImproperlyConfigured as exc:
        print(f"{program}: {' '.join(str(exc).split())}", file=sys.stderr)
        sys.exit(2)


# Only under the celery program: elsewhere (manage.py, gunicorn) this module is imported while
# the settings themselves are loading, and those programs report settings errors their own way.
if os.path.basename(sys.argv[0] if sys.argv else "") == "celery":
    check_settings("celery")

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
