"""The dashboard's totals on PostgreSQL follow the one definition the SQLite demo's do
(tests/system/observability/test_dashboard_sqlite.py): the day holds the live hour while the
rollup lags behind it."""

from __future__ import annotations

import pytest

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
    job = services.job_create(tenant, services.JobSpec(name="flaky", task_name="scheduler_app.echo", cron="* * * * *"))
    states = ["succeeded"] * 6 + ["failed", "failed", "dead", "skipped"]
    for i, state in enumerate(states):
        at = now - timedelta(minutes=5 + i * 3, seconds=30)
        JobRun.objects.create(
            job=job,
            tenant=tenant,
            scheduled_at=at,
            created_at=at,
            state=state,
            attempt=1,
            dispatched_at=at + timedelta(seconds=1),
            started_at=at + timedelta(seconds=2),
            finished_at=at + timedelta(seconds=3),
        )
    dashboard.roll_up(now, max_minutes=60)  # the day's oldest hour only: the last hour is not rolled up
    found = dashboard.overview(now)
    assert found.totals["hour"] == {"runs": 9, "failures": 3, "other": 1, "failure_rate": 100 * 3 / 9}
    assert found.totals["day"] == found.totals["hour"]
    assert RunState.SKIPPED in dashboard.OUTCOMES
