"""The PostgreSQL dashboard adds up: its header's totals equal the sums of its panels (the
runs-finished charts, the noisiest tenants, the top failing jobs) while the beats' rollup has
counted only part of the day. The same comparison on the embedded SQLite demo is in
tests/system/observability/test_dashboard_sqlite.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app import services
from scheduler_app.models import JobRun, RunMinute, RunState, db_now
from scheduler_app.observability import dashboard
from tests.support.dashboard_sums import disagreements, totals_and_sums

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL path")

# (minutes before now, state) of each tenant's runs: in the last hour, earlier in the day (some
# rolled up, some not yet), and one older than a day.
RUNS = {
    "alpha": [(5, "succeeded"), (12, "failed"), (20, "dead"), (25, "skipped"), (33, "retrying"), (41, "succeeded")]
    + [(180, "succeeded"), (185, "failed")]  # after the rollup's end: read live
    + [(300, "succeeded"), (310, "dead"), (320, "cancelled")]  # rolled up
    + [(30 * 60, "failed")],  # older than the day
    "beta": [(8, "succeeded"), (50, "succeeded")] + [(200, "dead")] + [(400, "succeeded"), (23 * 60, "failed")],
}
ROLLED_UP_UNTIL = timedelta(hours=4)  # the beats have rolled up the day up to four hours ago


@pytest.fixture
def seeded(db):
    now = db_now()
    for slug, runs in RUNS.items():
        tenant = services.tenant_create(slug=slug, name=slug.title(), timezone="UTC")
        job = services.job_create(tenant, services.JobSpec(name="nightly", task_name="scheduler_app.echo", every=60))
        JobRun.objects.bulk_create(
            JobRun(
                job=job,
                tenant=tenant,
                scheduled_at=now - timedelta(minutes=minutes, seconds=20),
                created_at=now - timedelta(minutes=minutes, seconds=20),
                state=state,
                attempt=1,
                started_at=now - timedelta(minutes=minutes, seconds=15),
                finished_at=now - timedelta(minutes=minutes, seconds=10),
            )
            for minutes, state in runs
        )
    minutes = int((dashboard.DAY - ROLLED_UP_UNTIL) / dashboard.MINUTE)
    assert dashboard.roll_up(now - ROLLED_UP_UNTIL + dashboard.CLOSED_AFTER, max_minutes=minutes) > 0
    return now


def test_the_header_s_totals_equal_the_panels_sums_while_the_rollup_lags(admin_client, seeded):
    assert RunMinute.objects.filter(tenant_id__gt=0).exists()  # part of the day is rolled up

    html = admin_client.get("/admin/dashboard/").content.decode()

    assert disagreements(html) == {}, totals_and_sums(html)
    figures = totals_and_sums(html)
    # alpha: 4 finished in the hour, 2 after the rollup, 2 rolled up; beta: 2, 1, 2.
    assert figures["hour runs / hour chart"][0] == 6 and figures["day runs / day chart"][0] == 13
    assert figures["day failures / day chart"][0] == 6
    assert "rolled up" not in html and "% of the day counted" not in html


def test_one_tenant_s_dashboard_adds_up_too(admin_client, seeded):
    html = admin_client.get("/admin/dashboard/?tenant=beta").content.decode()

    assert disagreements(html) == {}, totals_and_sums(html)
    assert totals_and_sums(html)["day runs / day chart"][0] == 5


def test_the_overview_counts_a_minute_once_whether_rolled_up_or_read_live(seeded):
    before = dashboard.overview(seeded).totals

    dashboard.roll_up(seeded, max_minutes=24 * 60)  # the rollup catches up
    after = dashboard.overview(seeded).totals

    assert before == after
    assert RunState.SKIPPED in dashboard.OUTCOMES
