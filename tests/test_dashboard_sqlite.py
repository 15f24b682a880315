"""The dashboard, the job page and the run page on the embedded SQLite demo (no DATABASE_URL):
a real `manage.py migrate` into a throwaway CRONFLEET_VAR_DIR, runs seeded through the services
and the models in a subprocess that renders the pages with Django's test client, and the
figures shown checked against the seeded runs. Needs no PostgreSQL or Redis."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_demo import embedded_env

REPO = Path(__file__).resolve().parent.parent

# Seeds, renders and prints the pages as JSON. The runs of "flaky": 9 in the last hour (6
# succeeded, 2 failed, 1 dead) plus 1 skipped; 5 more earlier in the day (4 succeeded, 1 failed);
# 2 older than a day (not counted). "young" (2 hours old): 2 succeeded in the hour, 1 before.
SCRIPT = r'''
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
'''


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    var_dir = tmp_path_factory.mktemp("embedded")
    env = embedded_env(var_dir)
    manage = str(REPO / "manage.py")
    migrate = subprocess.run([sys.executable, manage, "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=240)
    assert migrate.returncode == 0, migrate.stderr
    seeded = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=240)
    assert seeded.returncode == 0, seeded.stderr
    return {**json.loads(seeded.stdout), "stderr": seeded.stderr}


def text_of(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</', html, re.S)
    assert found, f"no #{element_id}"
    return found.group(1).strip()


def section(html: str, element_id: str) -> str:
    found = re.search(rf'<section class="cf-panel[^"]*" id="{element_id}">(.*?)</section>', html, re.S)
    assert found, f"no panel #{element_id}"
    return found.group(1)


def test_the_sqlite_dashboard_draws_every_panel(pages):
    page = pages["dashboard"]
    assert page["status"] == 200
    html = page["html"]
    assert "needs PostgreSQL" not in html
    assert "computed in Python" in text_of(html, "cf-engine-note")
    for panel in ("cf-runs-hour", "cf-lag-hour", "cf-dispatch-hour", "cf-runs-day", "cf-failure-day", "cf-forecast"):
        assert "<svg" in section(html, panel), panel
    # Runs were drawn: the hour's bars and both lag lines have marks, the forecast has fires.
    assert 'data-series="succeeded"' in section(html, "cf-runs-hour")
    assert 'data-series="failed"' in section(html, "cf-runs-hour")
    assert "cf-series-p99" in section(html, "cf-lag-hour")
    assert "cf-series-p50" in section(html, "cf-dispatch-hour")
    assert "no data" not in section(html, "cf-forecast")
    failing = section(html, "cf-failing")
    assert "demo/flaky" in failing and "<td>4</td>" in failing  # 2 failed + 1 dead this hour, 1 failed earlier
    assert "<td>17</td><td>4</td>" in section(html, "cf-tenants")  # runs finished, failed + dead
    assert "cf-alerts" in html and "cf-nodes" in html and "cf-queues" in html


def test_the_totals_follow_one_definition_and_the_day_holds_the_hour(pages):
    html = pages["dashboard"]["html"]
    assert text_of(html, "cf-hour-runs") == "11"  # succeeded + failed + dead; the skipped run is apart
    assert text_of(html, "cf-hour-failures") == "3"
    assert text_of(html, "cf-hour-rate") == f"{100 * 3 / 11:.2f}"
    assert text_of(html, "cf-hour-other") == "1"
    # The day: the hour's 11 + 5 + 1 earlier; none older than a day.
    assert text_of(html, "cf-day-runs") == "17"
    assert text_of(html, "cf-day-failures") == "4"
    assert text_of(html, "cf-day-rate") == f"{100 * 4 / 17:.2f}"
    assert int(text_of(html, "cf-day-runs")) >= int(text_of(html, "cf-hour-runs"))


def test_the_forecast_metrics_are_read_on_sqlite(pages):
    from prometheus_client.parser import text_string_to_metric_families

    assert pages["metrics"]["status"] == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(pages["metrics"]["html"]) for s in family.samples}
    fires = {labels: value for (name, labels), value in samples.items() if name == "cronfleet_forecast_fires"}
    # flaky fires every minute, young every five: due within the quarter hour, in the default queue
    assert sum(value for labels, value in fires.items() if ("horizon", "15m") in labels) >= 15
    assert "forecast" not in pages["stderr"], pages["stderr"]


def test_one_tenants_sqlite_dashboard(pages):
    page = pages["tenant"]
    assert page["status"] == 200
    assert text_of(page["html"], "cf-hour-runs") == "11"


def test_the_job_and_run_pages_render_on_sqlite(pages):
    for name in ("job", "young", "run"):
        assert pages[name]["status"] == 200, name
    assert "<svg" in pages["job"]["html"]


def test_a_young_jobs_timeline_spans_its_lifetime(pages):
    html = pages["young"]["html"]
    timeline = re.search(r'<figure class="cf-chart cf-timeline">.*?</figure>', html, re.S).group(0)
    xs = sorted(float(x) for x in re.findall(r'<rect class="cf-point[^>]* x="([\d.]+)"', timeline))
    assert len(xs) == 3
    # Over 24 hours the three fires (80 minutes apart at most) fell within a few pixels; over the
    # job's two hours they spread across the axis.
    assert xs[-1] - xs[0] > 200
    assert "since the job was created" in timeline


# --- PostgreSQL: the same one definition of the totals -----------------------------------------


@pytest.mark.django_db
def test_on_postgresql_the_day_holds_the_live_hour_when_the_rollup_lags(db):
    """The rollup has not reached the last hour (a beat caught up only the day's first hour):
    the day's totals still count the hour's runs, by the same definition as the hour's."""
    from datetime import timedelta

    from django.db import connection

    from scheduler_app import services
    from scheduler_app.models import JobRun, RunState, db_now
    from scheduler_app.observability import dashboard

    if connection.vendor != "postgresql":
        pytest.skip("the PostgreSQL path")
    now = db_now()
    tenant = services.tenant_create(slug="pg", name="PG", timezone="UTC")
    job = services.job_create(tenant, services.JobSpec(name="flaky", task_name="scheduler_app.echo",
                                                       cron="* * * * *"))
    states = ["succeeded"] * 6 + ["failed", "failed", "dead", "skipped"]
    for i, state in enumerate(states):
        at = now - timedelta(minutes=5 + i * 3, seconds=30)
        JobRun.objects.create(job=job, tenant=tenant, scheduled_at=at, created_at=at, state=state, attempt=1,
                              dispatched_at=at + timedelta(seconds=1), started_at=at + timedelta(seconds=2),
                              finished_at=at + timedelta(seconds=3))
    dashboard.roll_up(now, max_minutes=60)  # the day's oldest hour only: the last hour is not rolled up
    found = dashboard.overview(now)
    assert found.totals["hour"] == {"runs": 9, "failures": 3, "other": 1, "failure_rate": 100 * 3 / 9}
    assert found.totals["day"] == found.totals["hour"]
    assert RunState.SKIPPED in dashboard.OUTCOMES
