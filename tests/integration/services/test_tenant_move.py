"""Moving a tenant between cells (services/tenantmove.py, `manage.py tenants export|import`):
every fire before the cut stays with the old cell, every one from it on is the new cell's.

Two cells are two databases of the test's PostgreSQL server: this test's own and a second one
made and migrated here; this process's connection is switched between them
(tests/support/servers/: database_on). The fires each cell will make are read off its rows with the
schedule arithmetic the beats use, and compared with the fires the job made before the move.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from scheduler_app import schedules, services
from scheduler_app.alerts.rules import rule_set
from scheduler_app.http.secrets import tenant_signing_secrets
from scheduler_app.models import (
    AlertRule,
    ApiKey,
    AuditEvent,
    Calendar,
    Job,
    JobRun,
    MaintenanceWindow,
    RunState,
    Tenant,
    db_now,
)
from scheduler_app.services import tenantmove
from scheduler_app.services.windows import window_create
from tests.support import servers

pytestmark = pytest.mark.django_db(transaction=True)  # the second cell's connection sees committed rows
TASK = "scheduler_app.echo"
HORIZON = timedelta(days=3)
BERLIN = ZoneInfo("Europe/Berlin")


def server_conninfo() -> str:
    db = connection.settings_dict
    return f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} user={db['USER'] or 'postgres'} dbname=postgres"


@pytest.fixture(scope="module")
def second_database(django_db_setup, django_db_blocker):
    """A migrated database beside the test database, dropped after the module."""
    name = f"{connection.settings_dict['NAME']}_cell2"
    with psycopg.connect(server_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    with django_db_blocker.unblock():
        db = connection.settings_dict
        with servers.database_on(db["HOST"] or "127.0.0.1", db["PORT"] or 5432, name):
            pass
    yield name
    with django_db_blocker.unblock():
        connection.close()
    with psycopg.connect(server_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def new_cell(second_database):
    """`with new_cell():` runs its body against the second database, emptied first."""
    db = connection.settings_dict

    @contextlib.contextmanager
    def inside():
        with servers.database_on(db["HOST"] or "127.0.0.1", db["PORT"] or 5432, second_database, migrate=False):
            yield

    with inside():
        call_command("flush", interactive=False, verbosity=0)
    return inside


def fires_of(job: Job, until: datetime) -> list[datetime]:
    """The fires the beats will make for `job` from its next_run_at up to `until`."""
    found, fire, schedule = [], job.next_run_at, job.schedule
    while fire is not None and fire <= until:
        found.append(fire)
        fire = schedules.next_fire_after(schedule, fire)
    return found


def document_after_export(tenant: Tenant, cut: datetime, **options) -> dict:
    written = []
    services.tenant_export(tenant, cut, write=written.append, actor="test", **options)
    return json.loads(tenantmove.dumps(written[0]))  # as the file holds it


def business_cut(calendar: Calendar) -> datetime:
    """An instant off every grid the jobs keep, more than a day away (every daily job fires
    before it), on a business day of the calendar between two business days (in Berlin), so no
    moved fire straddles it."""
    calendar = calendar.business_calendar(db_now().year)
    cut = db_now() + timedelta(days=1, minutes=3, seconds=17)
    while not all(calendar.is_business_day((cut + timedelta(days=d)).astimezone(BERLIN).date()) for d in (-1, 0, 1)):
        cut += timedelta(days=1)
    return cut


@pytest.fixture
def moving(db):
    """(tenant, its API key, a cut) for a tenant with one job of each kind the cut must get right
    (each firing on both sides of the cut, or on one as said), its key, rule and window."""
    tenant = services.tenant_create(slug="moving", name="Moving", timezone="Europe/Berlin")
    now = db_now()
    spec = services.JobSpec
    cut = business_cut(services.calendar_create(tenant, name="work", country="DE"))
    jobs = {
        "cron": spec(name="cron", cron="*/7 * * * *", task_name=TASK),
        "jittered": spec(name="jittered", cron="0 * * * *", jitter_seconds=1800, task_name=TASK),
        "interval": spec(name="interval", every=47 * 60, start_at=now - timedelta(hours=5, seconds=13), task_name=TASK),
        "zoned": spec(name="zoned", cron="30 12 * * *", timezone="America/New_York", task_name=TASK),
        "business": spec(
            name="business", cron="0 20 * * *", calendar="work", calendar_policy="next_business_day", task_name=TASK
        ),
        "ends": spec(name="ends", cron="*/5 * * * *", end_at=cut + timedelta(days=2), task_name=TASK),
        "early-once": spec(name="early-once", at=now + timedelta(minutes=30), task_name=TASK),
        "late-once": spec(name="late-once", at=cut + timedelta(hours=6), task_name=TASK),
        "checkin": spec(name="checkin", cron="15 * * * *", target_kind="monitor", monitor={"grace_seconds": 60}),
    }
    made = {name: services.job_create(tenant, job) for name, job in jobs.items()}
    made["child"] = services.job_create(tenant, spec(name="child", after_job="cron", task_name=TASK))
    rule_set(made["cron"], {"on_failure": True, "max_duration_seconds": 30.0})
    key, raw = services.apikey_create(tenant=tenant, name="deploy")
    window_create(tenant, name="freeze", cron="0 22 * * 5", duration_minutes=60)
    JobRun.objects.create(
        job=made["cron"],
        tenant=tenant,
        scheduled_at=now - timedelta(minutes=7),
        state=RunState.SUCCEEDED,
        created_at=now,
        finished_at=now,
        result="done",
    )
    JobRun.objects.create(
        job=made["cron"], tenant=tenant, scheduled_at=now - timedelta(minutes=14), state=RunState.QUEUED, created_at=now
    )
    return tenant, raw, cut


def test_the_cut_splits_every_kind_of_schedule_between_the_cells_with_none_lost_or_twice(moving, new_cell):
    tenant, _, cut = moving
    until = cut + HORIZON
    before = {job.name: fires_of(job, until) for job in Job.objects.filter(tenant=tenant).select_related("calendar")}

    document = document_after_export(tenant, cut)

    old = {job.name: fires_of(job, until) for job in Job.objects.filter(tenant=tenant).select_related("calendar")}
    with new_cell():
        tenantmove.tenant_import(document, actor="test")
        new = {
            job.name: fires_of(job, until)
            for job in Job.objects.filter(tenant__slug="moving").select_related("calendar")
        }
    assert set(new) == set(before)
    for name, fires in before.items():
        # A jittered fire keeps to the cell of its nominal time, whichever side of the cut it lands.
        late = timedelta(seconds=1800) if name == "jittered" else timedelta(0)
        assert all(fire < cut + late for fire in old[name]), (name, old[name])
        assert all(fire >= cut for fire in new[name]), (name, new[name])
        assert sorted(old[name] + new[name]) == fires, name  # each fire once, in one cell or the other
        assert not set(old[name]) & set(new[name]), name
    assert old["late-once"] == [] and len(new["late-once"]) == 1
    assert len(old["early-once"]) == 1 and new["early-once"] == []
    for name in ("cron", "jittered", "interval", "zoned", "business", "ends", "checkin"):
        assert old[name] and new[name], f"{name} fires on both sides of the cut"
    assert before["child"] == old["child"] == new["child"] == []  # it fires after its parent, in the parent's cell


def test_the_new_cell_holds_the_keys_secrets_rules_windows_and_calendars(moving, new_cell, settings):
    tenant, raw_key, _ = moving
    secrets = tenant_signing_secrets(tenant, db_now())
    ping_key = str(Job.objects.get(tenant=tenant, name="checkin").monitor.ping_key)
    cut = db_now() + timedelta(minutes=10)

    document = document_after_export(tenant, cut)

    assert services.apikey_authenticate(raw_key) is None  # the old cell's keys stop at the export
    with pytest.raises(services.InvalidInput, match="is not active"):
        services.job_update(Job.objects.get(tenant=tenant, name="ends"), {"end_at": None})  # no unfencing
    with new_cell():
        moved = tenantmove.tenant_import(document, actor="test")
        assert (moved.slug, moved.name, moved.timezone, moved.is_active) == ("moving", "Moving", "Europe/Berlin", True)
        assert tenant_signing_secrets(moved, db_now()) == secrets  # re-encrypted here, the same secret
        assert services.apikey_authenticate(raw_key).tenant_id == moved.id
        checkin = Job.objects.get(tenant=moved, name="checkin")
        assert str(checkin.monitor.ping_key) == ping_key  # the crontab's ping URL keeps working
        rule = AlertRule.objects.get(job__tenant=moved, job__name="cron")
        assert (rule.on_failure, rule.max_duration_seconds) == (True, 30.0) and rule.checked_until >= cut
        assert Job.objects.get(tenant=moved, name="child").after_job.name == "cron"
        assert Job.objects.get(tenant=moved, name="business").calendar.country == "DE"
        assert MaintenanceWindow.objects.get(tenant=moved).cron == "0 22 * * 5"
        assert not JobRun.objects.exists()  # the history stays in the old cell by default
        assert AuditEvent.objects.get(action="tenant.imported").detail["cut"] == cut.isoformat()
    event = AuditEvent.objects.get(tenant=tenant, action="tenant.exported")
    ends = next(row for row in document["jobs"] if row["name"] == "ends")
    assert datetime.fromisoformat(event.detail["end_at_before"]["ends"]) == datetime.fromisoformat(ends["end_at"])
    assert list(event.detail["end_at_before"]) == ["ends"]
    with new_cell():
        assert Job.objects.get(name="ends").end_at == datetime.fromisoformat(ends["end_at"])  # its own end kept


def test_with_runs_the_finished_history_follows_and_open_runs_stay(moving, new_cell):
    tenant, _, _ = moving
    document = document_after_export(tenant, db_now() + timedelta(minutes=10), with_runs=True)

    assert [run["state"] for run in document["runs"]] == ["succeeded"]
    with new_cell():
        tenantmove.tenant_import(document)
        run = JobRun.objects.get()
        assert (run.job.name, run.state, run.result) == ("cron", "succeeded", "done")


def test_an_export_refuses_a_past_cut_and_a_second_export_and_fences_nothing_when_it_fails(moving):
    tenant, _, _ = moving
    versions = dict(Job.objects.filter(tenant=tenant).values_list("name", "version"))

    with pytest.raises(services.InvalidInput) as refused:
        services.tenant_export(tenant, db_now() - timedelta(seconds=1), write=lambda doc: None)
    assert refused.value.field == "cut" and "must be after this cell's now" in refused.value.message

    def broken(document):
        raise OSError("disk full")

    with pytest.raises(OSError):
        services.tenant_export(tenant, db_now() + timedelta(minutes=5), write=broken)
    assert dict(Job.objects.filter(tenant=tenant).values_list("name", "version")) == versions
    assert not AuditEvent.objects.filter(action="tenant.exported").exists()

    services.tenant_export(tenant, db_now() + timedelta(minutes=5), write=lambda doc: None)
    with pytest.raises(services.InvalidInput) as again:
        services.tenant_export(tenant, db_now() + timedelta(minutes=6), write=lambda doc: None)
    assert again.value.field == "tenant" and "was exported already" in again.value.message


def test_an_import_refuses_a_passed_cut_unless_late_a_tenant_it_has_and_a_bad_document(moving, new_cell):
    tenant, _, _ = moving
    document = document_after_export(tenant, db_now() + timedelta(seconds=30))
    passed = {**document, "cut": (datetime.now(UTC) - timedelta(minutes=30)).isoformat()}

    with new_cell():
        with pytest.raises(services.InvalidInput) as late:
            tenantmove.tenant_import(passed)
        assert late.value.field == "cut" and "--late" in late.value.message
        assert not Tenant.objects.exists()
        for broken, field in [
            ({**document, "format": "x"}, "format"),
            ({**document, "jobs": [{**document["jobs"][0], "colour": "red"}]}, "jobs[0].colour"),
            ({**document, "jobs": [{**document["jobs"][0], "calendar": "nope"}]}, "jobs[0].calendar"),
            ({**document, "runs": [{"job": "nope"}]}, "runs[0].job"),
        ]:
            with pytest.raises(services.InvalidInput) as bad:
                tenantmove.tenant_import(broken)
            assert bad.value.field == field, (field, bad.value.field, bad.value.message)
        assert not Tenant.objects.exists() and not Job.objects.exists()  # each refusal wrote nothing

        tenantmove.tenant_import(passed, late=True)
        overdue = Job.objects.get(name="cron")
        assert overdue.next_run_at < db_now() - timedelta(minutes=20)  # due at once: its misfire policy decides
        assert AuditEvent.objects.get(action="tenant.imported").detail["late"] is True
        with pytest.raises(services.InvalidInput) as twice:
            tenantmove.tenant_import(document)
        assert twice.value.field == "tenant.slug" and "already exists" in twice.value.message


def test_the_commands_write_an_owner_only_file_and_read_it_in_the_new_cell(moving, new_cell, tmp_path):
    tenant, _, _ = moving
    path = tmp_path / "moving.json"
    out, err = io.StringIO(), io.StringIO()
    versions = dict(Job.objects.filter(tenant=tenant).values_list("name", "version"))

    call_command("tenants", "export", "moving", "--cut", "+600", "--file", str(path), stdout=out, stderr=err)

    assert dict(Job.objects.filter(tenant=tenant).values_list("name", "version")) == {
        name: version + 1 for name, version in versions.items()
    }  # each fenced job is a new version

    assert "Exported tenant moving" in out.getvalue() and "10 jobs" in out.getvalue()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["moving.json"]  # no temporary left beside it
    cut = datetime.fromisoformat(json.loads(path.read_text())["cut"])
    fenced = Job.objects.filter(tenant=tenant).select_related("calendar")
    # A cut ten minutes away may lie next to a non-business day (a weekend): the calendar job's
    # fire moved over it from before the cut stays here, after the cut, and the export says so.
    straddling = sorted(job.name for job in fenced if tenantmove.straddles(job, cut))
    assert sorted(re.findall(r"warning: job '([^']+)'", err.getvalue())) == straddling
    assert all(
        job.next_run_at is None or job.next_run_at < cut + timedelta(seconds=job.jitter_seconds)
        for job in fenced
        if job.name not in straddling
    )  # a jittered fire goes by its nominal time
    with new_cell():
        out = io.StringIO()
        call_command("tenants", "import", str(path), stdout=out)
        assert "Imported tenant moving: 10 jobs" in out.getvalue()
        assert (
            Job.objects.filter(tenant__slug="moving").exclude(next_run_at=None).earliest("next_run_at").next_run_at
            >= cut
        )
    with pytest.raises(CommandError, match="cut"):
        call_command("tenants", "export", "moving", "--cut", "tomorrow", "--file", str(path))
    assert Path(path).exists() and ApiKey.objects.filter(tenant=tenant).exists()


def test_a_cut_next_to_a_non_business_day_warns_of_the_jobs_whose_moved_fires_may_run_twice(moving):
    tenant, _, _ = moving
    calendar = Calendar.objects.get(tenant=tenant).business_calendar(db_now().year)
    cut = db_now() + timedelta(hours=1)
    while calendar.is_business_day(cut.astimezone(BERLIN).date()):
        cut += timedelta(days=1)

    document = document_after_export(tenant, cut)

    assert len(document["warnings"]) == 1 and document["warnings"][0].startswith("job 'business': its calendar")


def test_a_moved_tenants_keys_and_ping_urls_keep_naming_the_cell_that_made_them(new_cell, tmp_path, settings):
    settings.CRONFLEET_CELL = "a"
    tenant = services.tenant_create(slug="named", name="Named")
    key, raw = services.apikey_create(tenant=tenant, name="deploy")
    job = services.job_create(
        tenant, services.JobSpec(name="backup", cron="0 3 * * *", target_kind="monitor", monitor={"grace_seconds": 60})
    )
    ping_key = job.monitor.ping_key
    path = tmp_path / "named.json"
    call_command("tenants", "export", "named", "--cut", "+600", "--file", str(path), stdout=io.StringIO())
    settings.CRONFLEET_CELL = "b"
    with new_cell():
        out = io.StringIO()
        call_command("tenants", "import", str(path), stdout=out)
        routes = tmp_path / "routes"
        routes.mkdir()
        call_command("cells", "routes", "--out", str(routes), stdout=io.StringIO())

        assert "name cell a: run `manage.py cells routes" in out.getvalue()
        assert ApiKey.objects.get(prefix=key.prefix).cell == "a"
        assert services.apikey_authenticate(raw).tenant.slug == "named"
        monitor = Job.objects.get(name="backup").monitor
        assert (monitor.ping_key, monitor.cell) == (ping_key, "a")
        assert services.ping_url(monitor).endswith(f"/ping/a/{ping_key}")  # the URL the crontab was given
        assert f"{key.prefix} b;" in (routes / "b.keys.map").read_text()
        assert f"{ping_key} b;" in (routes / "b.pings.map").read_text()
