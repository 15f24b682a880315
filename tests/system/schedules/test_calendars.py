"""Business-day calendars with a real beat and worker: a fire on a holiday is skipped and another
job's is moved to tomorrow (the rest of the calendars: tests/integration/schedules/test_calendars.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, RunState, db_now
from tests.conftest import wait_for
from tests.integration.schedules.test_calendars import ECHO

# --- a real beat and worker ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_skips_fires_on_todays_holiday_and_moves_another_jobs_to_tomorrow(processes, queue_name):
    tenant = services.tenant_create(slug="calendars", name="Calendars")
    now = db_now()
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if midnight - now < timedelta(minutes=3):  # "today" (UTC, the tenant's zone) must last the test
        wait_for(lambda: db_now() >= midnight, timeout=240, interval=1, what="UTC midnight to pass")
    today = db_now().date()
    services.calendar_create(tenant, name="ops", weekdays="mon-sun", extra_holidays={today.isoformat(): "Company day"})
    skipping = services.job_create(
        tenant, services.JobSpec(name="skipping", task_name=ECHO, every=2, queue=queue_name, calendar="ops")
    )
    moving = services.job_create(
        tenant,
        services.JobSpec(
            name="moving",
            task_name=ECHO,
            every=2,
            queue=queue_name,
            calendar="ops",
            calendar_policy="next_business_day",
        ),
    )
    control = services.job_create(tenant, services.JobSpec(name="control", task_name=ECHO, every=2, queue=queue_name))
    processes.worker(queue_name)
    processes.beat("beat", "--max-sleep", "1")

    wait_for(lambda: JobRun.objects.filter(job=skipping).count() >= 2, timeout=60, what="skipped fires")
    wait_for(
        lambda: JobRun.objects.filter(job=control, state=RunState.SUCCEEDED).count() >= 2,
        timeout=60,
        what="the control job's runs",
    )

    reasons = set(JobRun.objects.filter(job=skipping).values_list("state", "reason"))
    assert reasons == {(RunState.SKIPPED, f"calendar: {today.isoformat()} is not a business day in ops (Company day)")}
    moving.refresh_from_db()
    assert not JobRun.objects.filter(job=moving).exists()
    assert moving.next_run_at.date() == today + timedelta(days=1)
