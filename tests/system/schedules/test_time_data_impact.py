"""Time-data impact with real beats: a zone compiled by zic with another offset and a holidays
release with a new holiday, installed for the beats only (PYTHONTZPATH, PYTHONPATH), as an
upgrade of the machine's tzdata or of the holidays package would be. The jobs were made with
the data installed before; a starting beat reports both changes, per tenant, before their
fires, alerts once (a second beat raises nothing again), counts them on /metrics, and
`schedules impact --apply` re-plans them."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_app import services
from scheduler_app.models import Alert, AlertKind, Job, JobRun, db_now
from tests.conftest import process_env, wait_for
from tests.support import timedata
from tests.support.observing import free_ports, scrape, total

ROOT = Path(__file__).resolve().parents[3]
HOUR = timedelta(hours=1)


def jobs_far_from_now(tenant) -> tuple[Job, Job]:
    """A daily Tbilisi job and a daily job on Georgia's business days (every weekday one, fires
    moved past holidays), both at an hour about half a day away: no fire comes during the test."""
    hour = (db_now().hour + 12) % 24
    tbilisi = services.job_create(
        tenant,
        services.JobSpec(
            name="tbilisi", task_name="scheduler_app.echo", cron=f"0 {(hour + 4) % 24} * * *", timezone="Asia/Tbilisi"
        ),
    )
    services.calendar_create(tenant, name="ge", country=timedata.COUNTRY, weekdays="mon-sun")
    payroll = services.job_create(
        tenant,
        services.JobSpec(
            name="payroll",
            task_name="scheduler_app.echo",
            cron=f"0 {hour} * * *",
            timezone="UTC",
            calendar="ge",
            calendar_policy="next_business_day",
        ),
    )
    return tbilisi, payroll


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_starting_beat_reports_a_changed_zone_and_a_new_holiday_before_their_fires(processes, tmp_path):
    tenant = services.tenant_create(slug="timedata", name="Time data")
    tbilisi, payroll = jobs_far_from_now(tenant)
    compiled = timedata.compile_zone(tmp_path)
    assert (compiled / "Asia" / "Tbilisi").read_bytes() == timedata.fixed_zone_tzif(3 * 3600, "+03")
    release = timedata.holidays_release(tmp_path, payroll.next_run_at.date())
    new_data = {
        "PYTHONTZPATH": timedata.tzpath_with(compiled),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(release), os.environ.get("PYTHONPATH", "")])),
    }
    (metrics_port,) = free_ports(1)

    processes.beat(
        "beat", "--max-sleep", "1", "--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1", **new_data
    )
    wait_for(lambda: "time data: checked" in processes.log("beat"), timeout=60, what="the start-up check")

    log = processes.log("beat")
    assert "time data: tenant timedata: 2 moved in 2 jobs (calendar ge, zone Asia/Tbilisi)" in log, log
    alerts = Alert.objects.filter(tenant=tenant, kind=AlertKind.TIME_DATA)
    assert sorted(alerts.values_list("job__name", "detail__source")) == [
        ("payroll", "ge"),
        ("tbilisi", "Asia/Tbilisi"),
    ]
    assert all(alert.raised_at < min(tbilisi.next_run_at, payroll.next_run_at) for alert in alerts)
    assert not JobRun.objects.filter(tenant=tenant).exists()  # before the fires
    found = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    assert total(found, "cronfleet_time_data_changes", kind="moved") == 2

    processes.beat("second", "--max-sleep", "1", **new_data)
    wait_for(lambda: "time data: checked" in processes.log("second"), timeout=60, what="the second start-up check")
    assert "2 changed, 0 alerts raised" in processes.log("second")
    assert alerts.count() == 2

    applied = subprocess.run(
        [sys.executable, "manage.py", "schedules", "impact", "--apply", "--tenant", "timedata"],
        cwd=ROOT,
        env=process_env(**new_data),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Re-planned 2 jobs" in applied.stdout
    held_tbilisi, held_payroll = tbilisi.next_run_at, payroll.next_run_at
    tbilisi.refresh_from_db()
    payroll.refresh_from_db()
    assert tbilisi.next_run_at == held_tbilisi + HOUR
    assert payroll.next_run_at > held_payroll
    assert payroll.next_run_at.time() == held_payroll.time()
