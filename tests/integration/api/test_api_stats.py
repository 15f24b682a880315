"""GET /api/v1/stats/: staff may see every tenant at once, and the start lag of a retry
does not count its backoff (the definitions of stats.py, shared with the metrics)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app.models import Job, JobRun, RunState, Tenant, Trigger, db_now
from tests.integration.api.test_api import client_for, make_tenant


def scheduled_run(
    job: Job,
    *,
    minutes_ago: float,
    state: str = RunState.SUCCEEDED,
    attempt: int = 1,
    dispatch_lag: float | None = None,
    queued_before_start: float | None = None,
    start_lag: float | None = None,
    trigger: str = Trigger.SCHEDULE,
) -> JobRun:
    """A run scheduled `minutes_ago`, first dispatched `dispatch_lag` s later, started
    `start_lag` s after its fire time, and (a retry) queued `queued_before_start` s before it started."""
    at = db_now() - timedelta(minutes=minutes_ago)
    started = at + timedelta(seconds=start_lag) if start_lag is not None else None
    enqueued = (
        started - timedelta(seconds=queued_before_start)
        if queued_before_start is not None
        else (at + timedelta(seconds=dispatch_lag) if dispatch_lag is not None else None)
    )
    return JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=at,
        created_at=at,
        state=state,
        attempt=attempt,
        trigger=trigger,
        dispatched_at=at + timedelta(seconds=dispatch_lag) if dispatch_lag is not None else None,
        enqueued_at=enqueued,
        started_at=started,
    )


def job_of(tenant: Tenant, name: str = "j") -> Job:
    return Job.objects.create(tenant=tenant, name=name, cron="* * * * *", task_name="scheduler_app.echo")


@pytest.fixture
def two_tenants(db):
    a, b = make_tenant(), make_tenant()
    for n in range(1, 4):
        scheduled_run(job_of(a, f"a{n}"), minutes_ago=n, dispatch_lag=n, start_lag=2 * n)
    scheduled_run(job_of(b), minutes_ago=5, state=RunState.DEAD, dispatch_lag=10, start_lag=20)
    return a, b


def test_staff_see_every_tenants_runs_at_once(two_tenants):
    staff = client_for(None)

    body = staff.get("/api/v1/stats/?all_tenants=true").json()

    assert body["tenant"] is None
    assert (body["counts"]["succeeded"], body["counts"]["dead"], body["total"]) == (3, 1, 4)
    assert body["failure_rate"] == pytest.approx(1 / 4)
    assert body["dispatch_lag_seconds"]["count"] == 4 and body["dispatch_lag_seconds"]["p50"] == pytest.approx(2.5)
    assert body["start_lag_seconds"]["p50"] == pytest.approx(5.0)


def test_one_tenants_stats_say_whose_they_are(two_tenants):
    a, _ = two_tenants

    body = client_for(a).get("/api/v1/stats/").json()

    assert (body["tenant"], body["total"], body["failure_rate"]) == (a.slug, 3, 0.0)


def test_a_tenant_key_cannot_ask_for_every_tenant(two_tenants):
    a, _ = two_tenants

    response = client_for(a).get("/api/v1/stats/?all_tenants=true")

    assert response.status_code == 403
    assert "only staff" in response.json()["errors"][0]["message"]


def test_staff_still_name_a_tenant_for_one_tenants_stats(two_tenants):
    _, b = two_tenants
    staff = client_for(None)

    assert staff.get("/api/v1/stats/").status_code == 400
    assert staff.get("/api/v1/stats/", HTTP_X_CRONFLEET_TENANT=b.slug).json()["total"] == 1


def test_a_retrys_start_lag_leaves_out_its_backoff(db):
    tenant = make_tenant()
    job = job_of(tenant)
    scheduled_run(job, minutes_ago=2, attempt=1, dispatch_lag=0.5, start_lag=1.0)
    # Attempt 3 started 40 minutes after its fire time (backoffs), but 2 s after it was queued again.
    scheduled_run(job, minutes_ago=45, attempt=3, dispatch_lag=0.5, start_lag=2400, queued_before_start=2)

    body = client_for(tenant).get("/api/v1/stats/").json()

    assert body["start_lag_seconds"]["count"] == 2
    assert body["start_lag_seconds"]["p99"] == pytest.approx(1.99)
