"""The embedded setup a first run gets (no DATABASE_URL or CELERY_BROKER_URL: SQLite and the
filesystem broker under a throwaway CRONFLEET_VAR_DIR), for the tests that run `manage.py`
there (test_demo, test_dashboard_sqlite, test_dashboard_sqlite_browser, test_autopause), and
the script that seeds and renders the dashboard's pages on it."""

from __future__ import annotations

import os
from pathlib import Path


def embedded_env(var_dir: Path) -> dict[str, str]:
    """The environment of a first run: project settings, no database or broker URLs."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", CRONFLEET_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")
    return env


# Seeds, renders and prints the pages as JSON. The runs of "flaky": 9 in the last hour (6
# succeeded, 2 failed, 1 dead) plus 1 skipped; 5 more earlier in the day (4 succeeded, 1 failed);
# 2 older than a day (not counted). "young" (2 hours old): 2 succeeded in the hour, 1 before.
DASHBOARD_SCRIPT = r"""
import json, sys
from datetime import timedelta
import django
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState, db_now

now = db_now()
tenant = services.tenant_create(slug="demo", name="Demo", timezone="UTC")
job = services.job_create(tenant, services.JobSpec(name="flaky", task_name="scheduler_app.echo",
                                                   cron="* * * * *"))
young = services.job_create(tenant, services.JobSpec(name="young", task_name="scheduler_app.echo",
                                                     cron="*/5 * * * *"))
Job.objects.filter(pk=young.pk).update(created_at=now - timedelta(hours=2))

def run(job, minutes_ago, state, lag=2.0, start=3.0):
    at = now - timedelta(minutes=minutes_ago, seconds=30)
    return JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=at, created_at=at, state=state,
                                 enqueued_at=at + timedelta(seconds=lag), dispatched_at=at + timedelta(seconds=lag),
                                 started_at=at + timedelta(seconds=start), finished_at=at + timedelta(seconds=start + 1),
                                 error="boom" if state in ("failed", "dead") else "")

for i, state in enumerate(["succeeded"] * 6 + ["failed", "failed", "dead", "skipped"]):
    run(job, 5 + i * 3, state, lag=1.0 + i, start=2.0 + i)
for i, state in enumerate(["succeeded"] * 4 + ["failed"]):
    run(job, 120 + i * 60, state)
for minutes in (26 * 60, 30 * 60):
    run(job, minutes, "succeeded")
for minutes in (10, 40, 90):
    run(young, minutes, "succeeded")
last = JobRun.objects.filter(job=job).order_by("-scheduled_at").first()
user = get_user_model().objects.create_superuser("admin", "admin@example.com", "pw")
client = Client(HTTP_HOST="127.0.0.1")
client.force_login(user)
out = {}
for name, path in (("dashboard", "/admin/dashboard/"), ("tenant", "/admin/dashboard/?tenant=demo"),
                   ("job", f"/admin/scheduler_app/job/{job.pk}/change/"),
                   ("young", f"/admin/scheduler_app/job/{young.pk}/change/"),
                   ("run", f"/admin/scheduler_app/jobrun/{last.pk}/change/"), ("metrics", "/metrics")):
    response = client.get(path)
    out[name] = {"status": response.status_code, "html": response.content.decode()}
json.dump(out, sys.stdout)
"""
