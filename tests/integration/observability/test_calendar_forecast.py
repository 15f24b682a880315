"""The dashboard's forecast (observability/dashboard.py) counts fires as the beat plans them
with the jobs' calendars: a fire its calendar skips is not counted, one it moves counts on
the day it moves to; the calendars are read in one query (models.business_calendars, which
the beat's batch_calendars reads through too), both on PostgreSQL and in the SQLite demo's
Python path."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app import schedules, services
from scheduler_app.models import Job, Tenant
from scheduler_app.observability import dashboard

ECHO = "scheduler_app.echo"
# A Tuesday made a holiday by hand; Monday and Wednesday are business days.
HOLIDAY = "2031-03-04"
ON_THE_HOLIDAY = datetime(2031, 3, 4, 10, 0, 30, tzinfo=UTC)
BEFORE_MIDNIGHT = datetime(2031, 3, 3, 23, 30, 30, tzinfo=UTC)  # its hour reaches into the holiday
OVERVIEWS = [pytest.param(dashboard.overview, id="postgresql"), pytest.param(dashboard.overview_in_python, id="python")]


@pytest.fixture
def acme(db) -> Tenant:
    tenant = services.tenant_create(slug="acme", name="Acme", timezone="UTC")
    services.calendar_create(tenant, name="ops", extra_holidays={HOLIDAY: "Founders' day"})
    return tenant


def job(tenant: Tenant, name: str, cron: str, now: datetime, *, policy: str | None = None) -> Job:
    """A job whose next_run_at is what the beat holds at `now`: its first fire after it
    (under the job's calendar: a moved fire, or under skip the plain one)."""
    spec = services.JobSpec(
        name=name,
        task_name=ECHO,
        cron=cron,
        timezone="UTC",
        calendar="ops" if policy else "",
        calendar_policy=policy or "skip",
    )
    made = services.job_create(tenant, spec)
    Job.objects.filter(id=made.id).update(next_run_at=schedules.next_fire_after(made.schedule, now))
    return made


@pytest.mark.parametrize("overview", OVERVIEWS)
def test_a_skip_job_counts_no_fire_on_its_holiday_and_a_moved_job_none_today(acme, overview):
    plain = job(acme, "plain", "*/5 * * * *", ON_THE_HOLIDAY)
    job(acme, "skipping", "*/5 * * * *", ON_THE_HOLIDAY, policy="skip")
    moved = job(acme, "moving", "*/5 * * * *", ON_THE_HOLIDAY, policy="next_business_day")

    found = overview(ON_THE_HOLIDAY, acme.id)

    assert Job.objects.get(id=moved.id).next_run_at == datetime(2031, 3, 5, 0, 0, tzinfo=UTC)
    assert sum(found.forecast) == 11  # the plain job's, 10:05 to 10:55; none of the other two's
    Job.objects.filter(id=plain.id).update(enabled=False)
    assert sum(overview(ON_THE_HOLIDAY, acme.id).forecast) == 0


@pytest.mark.parametrize("overview", OVERVIEWS)
def test_fires_after_midnight_on_the_holiday_are_not_counted_when_skipped_or_moved_away(acme, overview):
    job(acme, "skipping", "*/10 * * * *", BEFORE_MIDNIGHT, policy="skip")
    job(acme, "moving", "*/10 * * * *", BEFORE_MIDNIGHT, policy="next_business_day")

    found = overview(BEFORE_MIDNIGHT, acme.id)

    counted = {
        minute.strftime("%H:%M"): count
        for minute, count in zip(found.forecast_minutes, found.forecast, strict=True)
        if count
    }
    assert counted == {"23:40": 2, "23:50": 2}  # Monday's; Tuesday's 00:00, 00:10, 00:20 do not run then


def test_a_fire_moved_earlier_counts_once_where_it_moves_to(acme):
    # Tuesday 09:00 moves to Monday 09:00, where Monday's own fire is: one run, counted once.
    job(acme, "earlier", "0 9 * * *", datetime(2031, 3, 3, 8, 30, tzinfo=UTC), policy="previous_business_day")

    found = dashboard.overview(datetime(2031, 3, 3, 8, 30, tzinfo=UTC), acme.id)

    assert sum(found.forecast) == 1 and found.forecast[30] == 1


def test_the_forecast_reads_the_calendars_in_one_query_whatever_the_number_of_jobs(acme):
    services.calendar_create(acme, name="ops-2", extra_holidays={HOLIDAY: "Founders' day"})
    for n in range(6):
        made = job(acme, f"j{n}", f"{n} * * * *", ON_THE_HOLIDAY, policy="skip")
        if n % 2:
            Job.objects.filter(id=made.id).update(calendar=acme.calendars.get(name="ops-2"))

    with CaptureQueriesContext(connection) as queries:
        found = dashboard.overview(ON_THE_HOLIDAY, acme.id)

    assert sum(found.forecast) == 0
    assert sum('"scheduler_app_calendar"' in query["sql"] for query in queries.captured_queries) == 1


def test_without_calendars_the_forecast_reads_none(acme):
    job(acme, "plain", "*/5 * * * *", ON_THE_HOLIDAY)

    with CaptureQueriesContext(connection) as queries:
        found = dashboard.overview(ON_THE_HOLIDAY, acme.id)

    assert sum(found.forecast) == 11
    assert not any('"scheduler_app_calendar"' in query["sql"] for query in queries.captured_queries)
