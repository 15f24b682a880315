"""services/impact.py on the real database: jobs made with the zone and holiday data installed,
then a zone with another offset (the bytes zic makes of it: no process here) and a holidays release with a new holiday swapped in
(tests/support/timedata.py); the change reported per tenant with its cause, alerted once,
re-planned by `schedules impact --apply`, counted on the beat's metric."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import OutputWrapper
from django.test import override_settings

from bench import timedata as bench_timedata
from scheduler_app import services
from scheduler_app.models import Alert, AlertKind, AuditEvent, Job, JobRun, RunState, db_now
from scheduler_app.observability import metrics
from scheduler_app.schedules import Cause, ChangeKind
from scheduler_app.services import impact
from tests.support import timedata

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def tbilisi_cron() -> str:
    """Daily at the Tbilisi hour that falls about half a day from now under UTC+04:00 and under
    UTC+03:00 alike: the change of zone then moves each fire an hour and never makes one appear
    (a fire today that the held data had already passed) or vanish, whatever hour it is."""
    hour = (db_now().hour + 12 + 4) % 24
    return f"0 {hour} * * *"


def tbilisi_job(tenant, name: str = "nightly") -> Job:
    return services.job_create(
        tenant,
        services.JobSpec(name=name, task_name="scheduler_app.echo", cron=tbilisi_cron(), timezone="Asia/Tbilisi"),
    )


def georgian_job(tenant) -> Job:
    """Daily at 09:00 UTC on Georgia's business days, every weekday one, moved past holidays."""
    services.calendar_create(tenant, name="ge", country=timedata.COUNTRY, weekdays="mon-sun")
    spec = services.JobSpec(
        name="payroll",
        task_name="scheduler_app.echo",
        cron="0 9 * * *",
        timezone="UTC",
        calendar="ge",
        calendar_policy="next_business_day",
    )
    return services.job_create(tenant, spec)


def test_a_changed_zone_is_reported_alerted_once_and_replanned(tenant, tmp_path):
    job = tbilisi_job(tenant)
    held = job.next_run_at

    with timedata.zones_from(timedata.write_zone(tmp_path)):
        report = impact.impact_report(tenant=tenant)
        [item] = report.jobs
        [change] = item.changes
        first_alerts, second_alerts = impact.raise_alerts(report), impact.raise_alerts(impact.impact_report())
        replanned = impact.impact_apply(report, actor="test")
        after = impact.impact_report(tenant=tenant)

    assert (item.tenant, item.name) == (tenant.slug, "nightly")
    assert (change.kind, change.old, change.new) == (ChangeKind.MOVED, held, held + HOUR)
    assert (change.cause, change.source) == (Cause.ZONE, "Asia/Tbilisi")
    assert "is UTC+03:00 now, was UTC+04:00" in change.detail
    assert (first_alerts, second_alerts) == (1, 0)
    alert = Alert.objects.get(job=job)
    assert alert.kind == AlertKind.TIME_DATA
    assert alert.message.startswith("time data: moved ")
    assert alert.detail["source"] == "Asia/Tbilisi"
    assert replanned == 1
    job.refresh_from_db()
    assert job.next_run_at == held + HOUR
    event = AuditEvent.objects.get(job=job, action="job.time_data_replanned")
    assert event.detail["next_run_at"] == [held.isoformat(), (held + HOUR).isoformat()]
    assert after.jobs == []


def test_a_new_holiday_moves_a_fire_under_next_business_day(tenant):
    job = georgian_job(tenant)
    held = job.next_run_at

    with timedata.holiday_added(held.date()):
        [item] = impact.impact_report(tenant=tenant).jobs

    [change] = item.changes
    assert (change.kind, change.old, change.cause, change.source) == (ChangeKind.MOVED, held, Cause.CALENDAR, "ge")
    assert change.new is not None and change.new > held
    assert change.detail == f"{held.date().isoformat()} is not a business day ({timedata.NEW_HOLIDAY})"


def test_the_same_data_reports_nothing(tenant):
    tbilisi_job(tenant)
    georgian_job(tenant)

    report = impact.impact_report(tenant=tenant)

    assert (report.checked, report.jobs) == (2, [])


def test_recorded_runs_are_checked_and_left_as_they_are(tenant, tmp_path):
    job = tbilisi_job(tenant)
    recorded = job.next_run_at - timedelta(days=1)
    JobRun.objects.create(
        job=job, tenant=tenant, scheduled_at=recorded, state=RunState.PENDING, created_at=recorded - HOUR
    )

    with timedata.zones_from(timedata.write_zone(tmp_path)):
        report = impact.impact_report(tenant=tenant, now=recorded - HOUR)
        impact.impact_apply(report)

    changes = [(change.held, change.old, change.new) for change in report.jobs[0].changes]
    assert ("ledger", recorded, recorded + HOUR) in changes
    assert JobRun.objects.get(job=job).scheduled_at == recorded


def test_apply_sets_a_fire_moved_into_the_past_due_so_the_beat_runs_it_at_once(tenant, tmp_path):
    job = tbilisi_job(tenant)
    held = job.next_run_at  # at UTC+04:00
    half_an_hour_past_the_new_fire = held - HOUR / 2

    with timedata.zones_from(timedata.write_zone(tmp_path, seconds=5 * 3600, abbreviation="+05")):
        report = impact.impact_report(tenant=tenant, now=half_an_hour_past_the_new_fire)
        impact.impact_apply(report)

    [change] = report.jobs[0].changes
    assert (change.kind, change.old, change.new) == (ChangeKind.MOVED, held, held - HOUR)
    job.refresh_from_db()
    assert job.next_run_at == held - HOUR


def test_apply_leaves_a_job_edited_since_the_report(tenant, tmp_path):
    job = tbilisi_job(tenant)
    with timedata.zones_from(timedata.write_zone(tmp_path)):
        report = impact.impact_report(tenant=tenant)
        Job.objects.filter(id=job.id).update(next_run_at=job.next_run_at + timedelta(days=1))

        assert impact.impact_apply(report) == 0

    assert not AuditEvent.objects.filter(job=job, action="job.time_data_replanned").exists()


def test_the_command_prints_per_tenant_and_json_and_applies(tenant, tmp_path, capsys):
    job = tbilisi_job(tenant)
    with timedata.zones_from(timedata.write_zone(tmp_path)):
        with pytest.raises(SystemExit) as exited:
            call_command("schedules", "impact", "--tenant", tenant.slug)
        text = capsys.readouterr().out
        with pytest.raises(SystemExit):
            call_command("schedules", "impact", "--tenant", tenant.slug, "--json", "--horizon", "2d")
        data = json.loads(capsys.readouterr().out)
        call_command("schedules", "impact", "--tenant", tenant.slug, "--apply")
        applied = capsys.readouterr().out

    assert exited.value.code == 2
    assert f"Tenant {tenant.slug}: 1 moved in 1 job (zone Asia/Tbilisi)" in text
    assert "Fix: `manage.py schedules impact --apply`" in text
    assert data["counts"] == {"moved": 1}
    assert data["horizon_seconds"] == 2 * 86400
    assert data["tenants"][tenant.slug][0]["changes"][0]["cause"] == "zone"
    assert "Re-planned 1 job" in applied
    job.refresh_from_db()
    assert job.next_run_at.isoformat() == data["tenants"][tenant.slug][0]["replan"]


def test_the_command_names_a_bad_horizon():
    with pytest.raises(Exception, match="horizon: must be a whole number of days"):
        call_command("schedules", "impact", "--horizon", "soon")


def test_the_plan_of_schedules_as_code_shows_the_impact_on_its_jobs(tenant, tmp_path, capsys):
    declaration = tmp_path / "schedules.toml"
    declaration.write_text(
        f'owner = "ops"\ntenant = "{tenant.slug}"\n\n[[jobs]]\nname = "nightly"\ncron = "{tbilisi_cron()}"\n'
        'timezone = "Asia/Tbilisi"\ntask = "scheduler_app.echo"\n'
    )
    call_command("schedules", "apply", "--file", str(declaration))
    capsys.readouterr()

    with timedata.zones_from(timedata.write_zone(tmp_path)):
        call_command("schedules", "plan", "--file", str(declaration))  # exit 0: no change to apply
    text = capsys.readouterr().out

    assert "No changes: 1 job up to date." in text
    assert "Time-data impact on these jobs (`schedules impact --apply` re-plans them):" in text
    assert f"Tenant {tenant.slug}: 1 moved in 1 job (zone Asia/Tbilisi)" in text


@override_settings(CRONFLEET_TIME_DATA_STARTUP_JOBS=1)
def test_the_start_up_check_is_capped_and_sets_the_metric(tenant, tmp_path, caplog):
    tbilisi_job(tenant, "first")
    tbilisi_job(tenant, "second")

    with timedata.zones_from(timedata.write_zone(tmp_path)), caplog.at_level("INFO"):
        report = impact.startup_check()

    assert report is not None and report.capped and report.checked == 1
    assert metrics.TIME_DATA_CHANGES.labels("moved")._value.get() == 1
    assert f"time data: tenant {tenant.slug}: 1 moved in 1 job (zone Asia/Tbilisi)" in caplog.text
    assert "the 1 due soonest (CRONFLEET_TIME_DATA_STARTUP_JOBS)" in caplog.text


@override_settings(CRONFLEET_TIME_DATA_STARTUP_JOBS=0)
def test_the_start_up_check_can_be_turned_off():
    assert impact.startup_check() is None


class BenchCommand:
    """What bench/timedata.py needs of the bench command: its stdout and its notes."""

    def __init__(self) -> None:
        self.out = io.StringIO()
        self.stdout = OutputWrapper(self.out)
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_bench_timedata_checks_every_job_and_finds_no_change():
    command = BenchCommand()

    ok = bench_timedata.run(command, bench_timedata.Options(jobs=30))

    out = command.out.getvalue()
    assert ok, out
    assert "jittered  30 jobs checked in" in out and "shared    30 jobs checked in" in out
    assert out.count("0 changed (ok)") == 2
