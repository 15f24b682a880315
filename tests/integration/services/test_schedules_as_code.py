"""Schedules as code (services/declared.py, `manage.py schedules plan|apply`, `import_beat
--to-file`): declarations in TOML and in apps' schedules.py kept in step with the real
PostgreSQL, through the services. A real beat and worker firing a job made by apply:
tests/system/services/test_schedules_as_code.py."""

from __future__ import annotations

import io
import textwrap
from datetime import timedelta
from unittest import mock

import pytest
from celery.schedules import crontab
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

import scheduler_app.schedules
from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, Tenant, db_now
from scheduler_app.services import declared

BILLING = """
owner = "billing"
tenant = "acme"

[[jobs]]
name = "invoices"
cron = "0 3 * * *"
timezone = "Europe/Berlin"
task = "scheduler_app.echo"
args = [1]
tags = ["billing"]

[[jobs]]
name = "reminders"
every = 600
task = "scheduler_app.echo"
kwargs = {kind = "reminder"}
priority = 7
"""


@pytest.fixture
def acme(db) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme")


@pytest.fixture
def declare(tmp_path):
    """declare(text): write the declaration file; returns its path."""
    path = tmp_path / "schedules.toml"

    def write(text: str) -> str:
        path.write_text(textwrap.dedent(text))
        return str(path)

    return write


def run(*args: str) -> tuple[int, str]:
    """`manage.py schedules ...`: (exit code, output); an error's message as the output."""
    out = io.StringIO()
    try:
        call_command("schedules", *args, stdout=out)
    except SystemExit as exc:
        return exc.code, out.getvalue()
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue()


def jobs_of(owner: str) -> dict[str, Job]:
    return {job.name: job for job in Job.objects.filter(managed_by=owner)}


def test_a_plan_on_an_empty_database_lists_the_creates(acme, declare):
    path = declare(BILLING)

    code, out = run("plan", "--file", path)

    assert code == 2, out
    assert "+ create acme/invoices" in out and "cron 0 3 * * * (Europe/Berlin); task scheduler_app.echo" in out
    assert "+ create acme/reminders" in out
    assert "Plan: 2 to create, 0 to change, 0 to remove (paused), 0 unchanged." in out
    assert "Fingerprint: " in out
    assert not Job.objects.exists()


def test_apply_creates_through_the_services_and_a_second_run_changes_nothing(acme, declare):
    path = declare(BILLING)

    code, out = run("apply", "--file", path)

    assert code == 0, out
    assert "2 created, 0 changed, 0 paused" in out
    jobs = jobs_of("billing")
    assert sorted(jobs) == ["invoices", "reminders"]
    assert jobs["invoices"].cron == "0 3 * * *" and jobs["invoices"].timezone == "Europe/Berlin"
    assert jobs["reminders"].every_seconds == 600 and jobs["reminders"].kwargs == {"kind": "reminder"}
    assert jobs["reminders"].priority == 7 and jobs["invoices"].args == [1]
    assert all(job.managed_digest == declared.job_digest(job) for job in jobs.values())
    assert set(AuditEvent.objects.filter(action="job.created").values_list("actor", flat=True)) == {"schedules:billing"}
    versions = {job.id: job.version for job in jobs.values()}

    code, out = run("plan", "--file", path)
    assert code == 0, out
    assert "No changes: 2 jobs up to date." in out
    code, out = run("apply", "--file", path)
    assert code == 0 and "Nothing to do: 2 jobs already as declared" in out and "nothing changed" in out
    assert {job.id: job.version for job in Job.objects.all()} == versions


def test_an_edited_declaration_plans_a_field_by_field_change_with_the_next_fires(acme, declare):
    run("apply", "--file", declare(BILLING))
    path = declare(BILLING.replace('cron = "0 3 * * *"', 'cron = "30 4 * * *"').replace("priority = 7", "priority = 2"))

    code, out = run("plan", "--file", path)

    assert code == 2, out
    assert "~ change acme/invoices" in out
    assert "cron  '0 3 * * *' → '30 4 * * *'" in out
    before, after = (line for line in out.splitlines() if "next fires" in line[:25])
    assert "02:00:00Z" in before or "01:00:00Z" in before  # 03:00 Berlin
    assert "03:30:00Z" in after or "02:30:00Z" in after  # 04:30 Berlin
    assert "~ change acme/reminders" in out and "priority  7 → 2" in out
    assert "Plan: 0 to create, 2 to change, 0 to remove (paused), 0 unchanged." in out

    code, out = run("apply", "--file", path)
    assert code == 0 and "0 created, 2 changed" in out
    assert jobs_of("billing")["invoices"].cron == "30 4 * * *" and jobs_of("billing")["reminders"].priority == 2
    assert run("plan", "--file", path)[0] == 0


NIGHTLY = """
owner = "reports"
tenant = "acme"

[[jobs]]
name = "nightly"
window = "daily 01:00-03:00"
timezone = "Europe/Berlin"
task = "scheduler_app.echo"
"""


def test_a_declared_window_is_placed_on_apply_and_kept_until_the_window_changes(acme, declare):
    for minute in range(120):  # every minute of the window but 02:17 holds a fixed-time job
        if minute != 77:
            services.job_create(
                acme,
                services.JobSpec(
                    name=f"fixed-{minute}",
                    task_name="scheduler_app.echo",
                    cron=f"{minute % 60} {1 + minute // 60} * * *",
                    timezone="Europe/Berlin",
                ),
            )
    path = declare(NIGHTLY)

    code, out = run("plan", "--file", path)
    assert code == 2 and "+ create acme/nightly" in out, out
    assert "window daily 01:00-03:00 (Europe/Berlin)" in out, out

    code, out = run("apply", "--file", path)
    assert code == 0 and "1 created" in out, out
    job = jobs_of("reports")["nightly"]
    assert (job.flex_window, job.cron, job.timezone) == ("daily 01:00-03:00", "17 2 * * *", "Europe/Berlin")
    assert job.flex_note.startswith("02:17 Europe/Berlin, chosen in daily 01:00-03:00")

    # Load added to 02:17 afterwards does not move it: the plan says nothing changed.
    services.job_create(
        acme, services.JobSpec(name="late", task_name="scheduler_app.echo", cron="17 2 * * *", timezone="Europe/Berlin")
    )
    code, out = run("plan", "--file", path)
    assert code == 0 and "No changes: 1 job up to date." in out, out
    services.jobs_rebalance(tenant=acme)  # a rebalance's move is not drift either
    code, out = run("plan", "--file", path)
    assert code == 0 and "No changes: 1 job up to date." in out and "drift" not in out, out

    # A new window in the declaration places the job again, inside it.
    path = declare(NIGHTLY.replace("daily 01:00-03:00", "daily 04:00-04:10"))
    code, out = run("plan", "--file", path)
    assert code == 2 and "~ change acme/nightly" in out and "'daily 01:00-03:00' → 'daily 04:00-04:10'" in out, out
    code, out = run("apply", "--file", path)
    assert code == 0 and "1 changed" in out, out
    job.refresh_from_db()
    assert job.flex_window == "daily 04:00-04:10" and job.cron.split()[1] == "4" and int(job.cron.split()[0]) < 10
    code, out = run("plan", "--file", path)
    assert code == 0, out


def test_a_bad_declared_window_is_refused_naming_the_job_and_the_field(acme, declare):
    code, out = run("plan", "--file", declare(NIGHTLY.replace("daily 01:00-03:00", "nightly")))

    assert code != 0
    assert "job acme/nightly: flex_window:" in out, out
    code, out = run(
        "plan",
        "--file",
        declare(NIGHTLY.replace('task = "scheduler_app.echo"', 'task = "scheduler_app.echo"\ncron = "0 1 * * *"')),
    )
    assert code != 0 and "flex_window: give a window or a schedule (cron), not both" in out, out
    assert not Job.objects.exists()


def test_a_job_no_longer_declared_is_planned_removed_paused_then_deleted_with_prune_delete(acme, declare):
    run("apply", "--file", declare(BILLING))
    path = declare(BILLING.split('[[jobs]]\nname = "reminders"')[0])

    code, out = run("plan", "--file", path)
    assert code == 2 and "- remove (pause) acme/reminders" in out and "1 to remove (paused)" in out

    code, out = run("apply", "--file", path)
    assert code == 0 and "1 paused" in out
    reminders = Job.objects.get(name="reminders")
    assert not reminders.enabled and reminders.paused_note == "schedules: no longer declared (owner billing)"
    assert run("plan", "--file", path)[0] == 0  # paused already: nothing more to do

    code, out = run("plan", "--file", path, "--prune", "delete")
    assert code == 2 and "- remove (delete) acme/reminders" in out
    code, out = run("apply", "--file", path, "--prune", "delete")
    assert code == 0 and "1 deleted" in out
    assert list(Job.objects.values_list("name", flat=True)) == ["invoices"]


def test_a_job_declared_again_after_its_pause_is_resumed(acme, declare):
    path = declare(BILLING)
    run("apply", "--file", path)
    run("apply", "--file", declare(BILLING.split('[[jobs]]\nname = "reminders"')[0]))

    code, out = run("plan", "--file", declare(BILLING))
    assert code == 2 and "enabled  False → True" in out
    run("apply", "--file", path)

    assert Job.objects.get(name="reminders").enabled


def test_an_edit_through_the_services_or_the_api_is_drift_naming_the_field_and_apply_sets_it_back(acme, declare):
    path = declare(BILLING)
    run("apply", "--file", path)
    jobs = jobs_of("billing")
    services.job_update(jobs["invoices"], {"priority": 9}, actor="cli")
    key, raw = services.apikey_create(tenant=acme, name="k")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = api.patch(
        f"/api/v1/jobs/{jobs['reminders'].id}/", {"queue": ""} | {"description": "by hand"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["managed_by"] == "billing"

    code, out = run("plan", "--file", path)

    assert code == 3, out
    assert "! drift: edited outside the declaration: priority (apply overwrites it)" in out
    assert "! drift: edited outside the declaration: description (apply overwrites it)" in out
    assert "2 jobs drifted." in out
    code, out = run("apply", "--file", path)
    assert code == 0 and "Drift overwritten" in out and "acme/invoices" in out
    assert jobs_of("billing")["invoices"].priority == 5 and jobs_of("billing")["reminders"].description == ""
    assert run("plan", "--file", path)[0] == 0


def test_the_read_only_setting_refuses_api_edits_naming_the_owner(acme, declare, settings):
    run("apply", "--file", declare(BILLING))
    settings.CRONFLEET_MANAGED_JOBS_READ_ONLY = True
    job = jobs_of("billing")["invoices"]
    key, raw = services.apikey_create(tenant=acme, name="k")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    response = api.patch(f"/api/v1/jobs/{job.id}/", {"priority": 1}, format="json")

    assert response.status_code == 400, response.json()
    message = str(response.json())
    assert "owner 'billing'" in message and "change its declaration" in message
    job.refresh_from_db()
    assert job.priority == 5
    with pytest.raises(services.InvalidInput, match="managed by schedules as code"):
        services.job_update(job, {"priority": 1}, actor="cli")
    assert run("apply", "--file", declare(BILLING.replace("priority = 7", "priority = 3")))[0] == 0


def test_a_stale_fingerprint_is_refused_and_nothing_is_applied(acme, declare):
    path = declare(BILLING)
    code, out = run("plan", "--file", path)
    fingerprint = out.split("Fingerprint: ")[1].split()[0]
    declare(BILLING.replace("priority = 7", "priority = 8"))

    code, out = run("apply", "--file", path, "--fingerprint", fingerprint)

    assert code == 1 and "fingerprint" in out and "nothing applied" in out
    assert not Job.objects.exists()
    code, out = run("plan", "--file", path)
    fresh = out.split("Fingerprint: ")[1].split()[0]
    # The database moving (a job of a declared name made meanwhile) also stales it.
    Job.objects.create(
        tenant=acme, name="invoices", task_name="scheduler_app.echo", cron="* * * * *", next_run_at=db_now()
    )
    assert run("apply", "--file", path, "--fingerprint", fresh)[0] == 1
    assert Job.objects.count() == 1
    code, out = run("plan", "--file", path)
    assert run("apply", "--file", path, "--fingerprint", out.split("Fingerprint: ")[1].split()[0])[0] == 0
    assert Job.objects.count() == 2


def test_a_bad_file_names_the_file_the_job_and_the_field_and_writes_nothing(acme, declare):
    path = declare(
        BILLING.replace('cron = "0 3 * * *"', 'cron = "0 25 * * *"').replace("priority = 7", "priority = 70")
    )

    code, out = run("apply", "--file", path)

    assert code == 1
    assert f"{path}: job acme/invoices: cron:" in out
    assert f"{path}: job acme/reminders: priority: must be between" in out
    assert not Job.objects.exists()
    code, out = run("plan", "--file", declare(BILLING.replace("priority = 7", "prio = 7")))
    assert code == 1 and "job 'reminders': prio: is not a job field" in out
    code, out = run("plan", "--file", declare("owner = 'x'\n[[jobs]]\nname = 'a'\ncron = '* * * * *'\n"))
    assert code == 1 and "job 'a': tenant: missing" in out
    code, out = run("plan", "--file", declare("owner = [\n"))
    assert code == 1 and "not valid TOML" in out


def test_a_failure_mid_apply_leaves_nothing_half_applied(acme, declare):
    run("apply", "--file", declare(BILLING))
    path = declare(
        BILLING.replace("priority = 7", "priority = 1") + '\n[[jobs]]\nname = "third"\nevery = 60\n'
        'task = "scheduler_app.echo"\n'
    )
    before = {job.id: (job.version, job.priority) for job in Job.objects.all()}

    with mock.patch("scheduler_app.services.declared.job_create", side_effect=RuntimeError("broker down")):
        with pytest.raises(RuntimeError):
            declared.apply_plan(declared.read_all(path))

    assert {job.id: (job.version, job.priority) for job in Job.objects.all()} == before
    assert not Job.objects.filter(name="third").exists()


def test_a_quota_refusal_mid_apply_rolls_back_the_earlier_creates(acme, declare):
    Tenant.objects.filter(id=acme.id).update(max_jobs=1)

    code, out = run("apply", "--file", declare(BILLING))

    assert code == 1 and "max_jobs" in out
    assert not Job.objects.exists()


def test_other_owners_jobs_and_hand_made_jobs_are_left_alone(acme, declare, make_job):
    ops = declare(
        BILLING.replace('owner = "billing"', 'owner = "ops"')
        .replace('"invoices"', '"ops-a"')
        .replace('"reminders"', '"ops-b"')
    )
    run("apply", "--file", ops)
    by_hand = Job.objects.create(
        tenant=acme, name="by-hand", task_name="scheduler_app.echo", cron="* * * * *", next_run_at=db_now()
    )
    path = declare(BILLING)

    code, out = run("plan", "--file", path)
    assert code == 2 and "Plan for owner billing:" in out and "ops-" not in out and "by-hand" not in out
    run("apply", "--file", path)
    code, out = run("plan", "--file", declare('owner = "billing"\ntenant = "acme"\n'), "--owner", "billing")
    assert code == 2 and out.count("- remove (pause)") == 2
    run("apply", "--file", declare('owner = "billing"\ntenant = "acme"\n'), "--owner", "billing")

    assert sorted(jobs_of("ops")) == ["ops-a", "ops-b"] and all(job.enabled for job in jobs_of("ops").values())
    by_hand.refresh_from_db()
    assert by_hand.enabled and by_hand.managed_by == "" and by_hand.version == 1
    assert not any(job.enabled for job in jobs_of("billing").values())


def test_a_job_of_another_owner_cannot_be_taken_over(acme, declare):
    run("apply", "--file", declare(BILLING))

    code, out = run("plan", "--file", declare(BILLING.replace('owner = "billing"', 'owner = "ops"')))

    assert code == 1 and "managed by owner 'billing'" in out


def test_an_apps_schedules_module_is_read_too(acme, monkeypatch):
    monkeypatch.setattr(
        scheduler_app.schedules,
        "SCHEDULES",
        {
            "owner": "app",
            "tenant": "acme",
            "jobs": [{"name": "from-app", "every": 60, "task": "scheduler_app.echo"}],
        },
        raising=False,
    )

    code, out = run("apply")

    assert code == 0 and "1 created" in out
    assert jobs_of("app")["from-app"].every_seconds == 60


def test_the_admin_marks_managed_jobs_and_warns_on_their_page(admin_client, acme, declare):
    run("apply", "--file", declare(BILLING))
    job = jobs_of("billing")["invoices"]
    Job.objects.create(
        tenant=acme, name="by-hand", task_name="scheduler_app.echo", cron="* * * * *", next_run_at=db_now()
    )

    page = admin_client.get(reverse("admin:scheduler_app_job_change", args=[job.pk])).content.decode()
    managed = admin_client.get(reverse("admin:scheduler_app_job_changelist"), {"managed_by": "+"})
    by_hand = admin_client.get(reverse("admin:scheduler_app_job_changelist"), {"managed_by": "-"})

    assert "is managed by schedules as code" in page and "change its declaration" in page
    assert sorted(j.name for j in managed.context["cl"].result_list) == ["invoices", "reminders"]
    assert [j.name for j in by_hand.context["cl"].result_list] == ["by-hand"]


@override_settings(
    CELERY_BEAT_SCHEDULE={
        "nightly": {"task": "scheduler_app.echo", "schedule": crontab(minute=15, hour=2), "args": [3]},
        "often": {"task": "scheduler_app.echo", "schedule": timedelta(minutes=5), "options": {"priority": 9}},
    },
    CELERY_TIMEZONE="Europe/Riga",
)
def test_import_beat_to_file_round_trips_through_plan_and_apply(acme, tmp_path):
    path = str(tmp_path / "beat.toml")
    out = io.StringIO()

    call_command("import_beat", "--tenant", "acme", "--from-settings", "--to-file", path, "--owner", "beat", stdout=out)

    assert "Wrote" in out.getvalue() and "2 jobs" in out.getvalue()
    assert not Job.objects.exists()
    code, plan = run("plan", "--file", path)
    assert code == 2 and "+ create acme/nightly" in plan and "cron 15 2 * * * (Europe/Riga)" in plan
    assert run("apply", "--file", path)[0] == 0
    assert jobs_of("beat")["nightly"].args == [3] and jobs_of("beat")["often"].every_seconds == 300
    assert jobs_of("beat")["nightly"].tags == ["celery-beat"]
    assert run("plan", "--file", path)[0] == 0
    with pytest.raises(CommandError, match="exists already"):
        call_command("import_beat", "--tenant", "acme", "--to-file", path, stdout=io.StringIO())


@pytest.mark.parametrize("action", ["plan", "apply"])
def test_nothing_declared_is_an_error_naming_the_file_not_a_clean_plan(db, settings, action):
    settings.CRONFLEET_SCHEDULES_FILE = ""
    tenant = services.tenant_create(slug="acme", name="Acme")
    services.job_create(tenant, services.JobSpec(name="kept", task_name="scheduler_app.echo", every=60))

    code, out = run(action)

    assert code == 1
    assert out == (
        f"schedules {action}: file: nothing declared: give --file or set CRONFLEET_SCHEDULES_FILE "
        "(or declare SCHEDULES in an app's schedules.py)"
    )
    assert Job.objects.filter(name="kept", enabled=True).exists()


def test_an_empty_file_is_still_a_declaration_of_no_jobs(db, tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("")

    code, out = run("plan", "--file", str(path))

    assert code == 0 and "No changes: 0 jobs up to date." in out, out
