"""The Celery application. Configuration lives in Django settings under the CELERY_ prefix."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("cronfleet")
# The worker's node heartbeat and metrics exporter (a bootstep, and its command-line option).
from scheduler_app.workerstep import install_worker_step  # noqa: E402 (imports no Django)

install_worker_step(app)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
