"""The operator's console (issue 13): what a person reads in the admin, without a browser.

tests/test_console_browser.py looks at the same pages through headless Chromium.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Tenant

TASK = "scheduler_app.echo"
BASE = datetime(2024, 1, 1, 18, 33, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def url(model: str, view: str, *args) -> str:
    return reverse(f"admin:scheduler_app_{model}_{view}", args=args)


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="demo", name="Demo", timezone="Europe/Berlin")


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="flaky", task_name=TASK, cron="*/5 * * * *"))


def make_run(job: Job, at: datetime, state: str = RunState.SUCCEEDED, **fields) -> JobRun:
    fields.setdefault("started_at", at + timedelta(seconds=1))
    fields.setdefault("finished_at", at + timedelta(seconds=6))
    return JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=at, state=state, created_at=at, **fields)


# --- 1. names, times, the audit trail, the index ------------------------------------------


def test_a_job_is_titled_and_listed_as_tenant_slash_name(admin_client, job):
    assert str(job) == "demo/flaky"

    change = admin_client.get(url("job", "change", job.pk)).content.decode()
    listing = admin_client.get(url("job", "changelist")).content.decode()

    assert "<h2>demo/flaky</h2>" in change
    assert ">demo/flaky<" in listing


def test_times_show_seconds_and_the_zone(admin_client, job):
    run = make_run(job, BASE)

    listing = admin_client.get(url("jobrun", "changelist")).content.decode()
    page = admin_client.get(url("jobrun", "change", run.pk)).content.decode()

    for html in (listing, page):
        assert "2024-01-01 18:33:05 UTC" in html
        assert "2024-01-01 18:33:06 UTC" in html  # started a second later: told apart
        assert "p.m." not in html


def test_the_audit_trail_names_the_job_of_run_events(admin_client, job):
    run = make_run(job, BASE, state=RunState.DEAD)
    # As dispatch.mark_lost_runs and the worker write them: the job's id, no name.
    AuditEvent.objects.create(tenant=job.tenant, job_id=job.pk, run_id=run.pk, action="run.lost", actor="beat")

    html = admin_client.get(url("auditevent", "changelist")).content.decode()

    assert f'<a href="{url("job", "change", job.pk)}">demo/flaky</a>' in html


def test_the_index_has_no_empty_celery_results_section(admin_client, db):
    html = admin_client.get("/admin/").content.decode()

    assert "Celery Results" not in html
    assert "Periodic Tasks" not in html
    assert "Cronfleet scheduler" in html
