"""A monitored (check-in) job runs elsewhere (docs/check-ins.md), so Cronfleet refuses to
trigger, replay or backfill it (issue 41, item 2): the services raise InvalidInput naming
`target`, `jobs trigger` exits 2 with one line, the API answers 400 naming the field, and the
admin offers none of those buttons. Against the real PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Tenant, db_now
from tests.integration.api.test_api import client_for, errors_of
from tests.support.admin import url
from tests.support.alerts import run_of
from tests.support.cli import fails

WHY = "a monitored job runs elsewhere and checks in; it cannot be {} here (its runs come from its pings)"


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme")


@pytest.fixture
def job(tenant) -> Job:
    spec = services.JobSpec(name="backup", target_kind="monitor", cron="0 3 * * *", monitor={"grace_seconds": 300})
    return services.job_create(tenant, spec)


@pytest.fixture
def failed(job) -> JobRun:
    return run_of(job, db_now() - timedelta(days=1), RunState.FAILED, error="missed: no check-in within 300 s")


def test_the_services_refuse_naming_target_and_write_nothing(job, failed):
    now = db_now()
    with pytest.raises(services.InvalidInput) as triggered:
        services.job_trigger(job, actor="test")
    with pytest.raises(services.InvalidInput) as backfilled:
        services.job_backfill(job, start=now - timedelta(days=3), end=now, dry_run=False, actor="test")
    with pytest.raises(services.InvalidInput) as replayed:
        services.run_replay(failed, actor="test")

    assert (triggered.value.field, triggered.value.message) == ("target", WHY.format("triggered"))
    assert (backfilled.value.field, backfilled.value.message) == ("target", WHY.format("backfilled"))
    assert (replayed.value.field, replayed.value.message) == ("target", WHY.format("replayed"))
    assert list(JobRun.objects.values_list("id", flat=True)) == [failed.id]
    failed.refresh_from_db()
    assert failed.state == RunState.FAILED and failed.attempt == 1
    assert not AuditEvent.objects.filter(action__in=["job.triggered", "job.backfilled", "run.replayed"]).exists()


def test_jobs_trigger_exits_2_with_one_line(job):
    error = fails("jobs", "trigger", "acme/backup")

    assert str(error) == f"jobs trigger: target: {WHY.format('triggered')}" and error.returncode == 2
    assert not JobRun.objects.exists()


def test_the_api_answers_400_naming_target(job, failed, tenant):
    api = client_for(tenant)
    now = db_now()
    window = {"start": (now - timedelta(days=3)).isoformat(), "end": now.isoformat(), "dry_run": False}

    trigger = api.post(f"/api/v1/jobs/{job.id}/trigger/")
    backfill = api.post(f"/api/v1/jobs/{job.id}/backfill/", window, format="json")
    replay = api.post(f"/api/v1/runs/{failed.id}/replay/")

    assert (trigger.status_code, errors_of(trigger)) == (400, {"target": WHY.format("triggered")})
    assert (backfill.status_code, errors_of(backfill)) == (400, {"target": WHY.format("backfilled")})
    assert (replay.status_code, errors_of(replay)) == (400, {"target": WHY.format("replayed")})
    assert JobRun.objects.count() == 1


def test_the_admin_offers_no_trigger_replay_or_backfill(job, failed, admin_client):
    page = admin_client.get(url("job", "change", job.pk)).content.decode()
    run_page = admin_client.get(url("jobrun", "change", failed.pk)).content.decode()
    posted = admin_client.post(reverse("admin:scheduler_app_job_console", args=[job.pk, "trigger"]), follow=True)
    bulk = admin_client.post(
        url("job", "changelist"), {"action": "trigger_jobs", "_selected_action": [job.pk]}, follow=True
    )

    assert 'id="cf-pause"' in page  # the other operations stay
    for button in ('id="cf-trigger"', 'id="cf-replay-last"', 'id="cf-backfill"', 'id="cf-backfill-dry"'):
        assert button not in page
    assert "cannot be triggered, replayed or backfilled here" in page
    assert 'id="cf-replay"' not in run_page
    assert f"rigger: target: {WHY.format('triggered')}" in posted.content.decode()  # "Trigger: ..."
    assert "Not triggered: acme/backup: a monitored job runs elsewhere" in bulk.content.decode()
    assert JobRun.objects.count() == 1
