"""`manage.py tenants` and `manage.py jobs` (list, show, runs, pause, resume, trigger,
preview) against the real PostgreSQL.

The tests call the commands with call_command (a bad value raises CommandError), through the
helpers in tests/support/cli.py; `jobs add` is tested in test_commands_add.py, `jobs edit`
and `jobs delete` in test_commands_edit.py, the table layout in
tests/unit/management/test_commands.py.
"""

from __future__ import annotations

import io
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Tenant, Trigger, db_now
from tests.conftest import take_broker_messages
from tests.support.cli import (  # noqa: F401 (acme and tokyo are fixtures)
    acme,
    add_job,
    add_run,
    fails,
    hour_after,
    run,
    table_rows,
    tokyo,
)

# --- tenants --------------------------------------------------------------------------


def test_tenants_add_and_list(db):
    out = run("tenants", "add", "acme", "--name", "Acme Corp", "--timezone", "Europe/Berlin")
    run("tenants", "add", "beta")
    add_job(Tenant.objects.get(slug="acme"), "one")
    add_job(Tenant.objects.get(slug="acme"), "two")

    assert "Created tenant acme (Acme Corp, Europe/Berlin)" in out
    assert table_rows(run("tenants", "list")) == [
        ["acme", "Acme Corp", "Europe/Berlin", "yes", "2"],
        ["beta", "beta", "UTC", "yes", "0"],
    ]


def test_tenants_list_pages_by_slug(db):
    for slug in ("a", "b", "c"):
        services.tenant_create(slug=slug)

    first = run("tenants", "list", "--limit", "2")
    second = run("tenants", "list", "--limit", "2", "--after", "b")

    assert [row[0] for row in table_rows(first)] == ["a", "b"]
    assert "(more tenants: --after b)" in first
    assert [row[0] for row in table_rows(second)] == ["c"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["Not A Slug"], "tenants add: slug: use 1-64 lowercase letters"),
        (["ok", "--timezone", "Mars/Olympus"], "tenants add: timezone: unknown time zone 'Mars/Olympus'"),
        (["acme"], "tenants add: slug: tenant 'acme' already exists"),
        (["ok", "--name", "Acme\u2028Corp"], "tenants add: name: must not contain the character U+2028 LINE SEPARATOR"),
        (["ok", "--name", "Acme \u202eproC"], "tenants add: name: must not contain the character U+202E"),
    ],
)
def test_tenants_add_refuses_bad_input(acme, argv, expected):
    error = fails("tenants", "add", *argv)

    assert str(error).startswith(expected)
    assert error.returncode == 2
    assert Tenant.objects.count() == 1


# --- jobs list ------------------------------------------------------------------------


def test_list_shows_schedule_status_next_run_and_last_run_state(acme, tokyo):
    now = db_now()
    cron_job = add_job(acme, "cron-job", cron="*/5 * * * *")
    interval = add_job(acme, "interval", every=60)
    once = add_job(tokyo, "once", at=hour_after(now))
    services.job_pause(interval, note="maintenance")
    add_run(cron_job, now - timedelta(minutes=10), RunState.SUCCEEDED)
    add_run(cron_job, now - timedelta(minutes=5), RunState.FAILED)  # the latest decides

    rows = table_rows(run("jobs", "list"))

    assert rows == [
        [
            str(cron_job.id),
            "acme",
            "cron-job",
            "cron */5 * * * * (UTC)",
            "enabled",
            cron_job.next_run_at.strftime("%Y-%m-%d %H:%M:%SZ"),
            "failed",
        ],
        [
            str(interval.id),
            "acme",
            "interval",
            "every 60s",
            "paused",
            interval.next_run_at.strftime("%Y-%m-%d %H:%M:%SZ"),
            "-",
        ],
        [
            str(once.id),
            "tokyo",
            "once",
            f"once at {once.run_at:%Y-%m-%d %H:%M:%S}Z",
            "enabled",
            once.next_run_at.strftime("%Y-%m-%d %H:%M:%SZ"),
            "-",
        ],
    ]
    assert [row[2] for row in table_rows(run("jobs", "list", "--tenant", "tokyo"))] == ["once"]


def test_list_pages_with_limit_and_after_id(acme):
    ids = [add_job(acme, f"job-{n}").id for n in range(5)]

    first = run("jobs", "list", "--limit", "2")
    last = run("jobs", "list", "--limit", "2", "--after-id", str(ids[3]))

    assert [int(row[0]) for row in table_rows(first)] == ids[:2]
    assert f"(more jobs: --after-id {ids[1]})" in first
    assert [int(row[0]) for row in table_rows(last)] == ids[4:]
    assert "more jobs" not in last


def test_list_uses_a_fixed_number_of_queries_however_many_jobs_and_runs(acme):
    now = db_now()

    def queries_for_listing() -> int:
        with CaptureQueriesContext(connection) as captured:
            run("jobs", "list", "--tenant", "acme")
        return len(captured)

    for n in range(2):
        add_run(add_job(acme, f"a{n}"), now, RunState.SUCCEEDED)
    few = queries_for_listing()
    for n in range(20):
        add_run(add_job(acme, f"b{n}"), now, RunState.FAILED)

    assert queries_for_listing() == few == 2  # the tenant, then one page of jobs with their last run


def test_list_with_no_jobs_and_bad_options(acme):
    assert run("jobs", "list").strip() == "(no jobs)"
    assert str(fails("jobs", "list", "--limit", "0")) == "jobs list: limit: must be between 1 and 1000"
    assert str(fails("jobs", "list", "--tenant", "zz")) == "jobs list: tenant: no tenant 'zz'"


# --- jobs show / runs -----------------------------------------------------------------


def test_show_by_id_and_by_tenant_and_name(tokyo):
    job = add_job(tokyo, "reports/daily", cron="30 8 * * 1-5", args=[1], kwargs={"k": "v"}, tags=["t"])
    base = datetime(2024, 1, 1, tzinfo=UTC)
    runs = [add_run(job, base + timedelta(days=n), reason=f"run {n}") for n in range(12)]

    by_id = run("jobs", "show", str(job.id))
    by_name = run("jobs", "show", "tokyo/reports/daily")  # the name may contain '/'

    assert by_id == by_name
    assert f"id                         {job.id}" in by_id
    for expected in (
        "tenant                     tokyo",
        "schedule                   cron 30 8 * * 1-5 (Asia/Tokyo)",
        "status                     enabled",
        "args                       [1]",
        'kwargs                     {"k": "v"}',
        "task_name                  scheduler_app.echo",
        "version                    1",
        "max_attempts               3",
    ):
        assert expected in by_id
    fires = by_id.split("next 5 fires:")[1].split("last 10 runs:")[0]
    assert len(re.findall(r"08:30:00 JST", fires)) == 5
    shown_runs = table_rows(by_id.split("last 10 runs:")[1])
    assert [int(row[0]) for row in shown_runs] == [r.id for r in reversed(runs[2:])]  # newest first


def test_runs_newest_first_with_state_filter_and_limit(acme):
    job = add_job(acme)
    base = datetime(2024, 1, 1, tzinfo=UTC)
    ok = add_run(job, base, RunState.SUCCEEDED, started_at=base, finished_at=base + timedelta(seconds=3))
    failed = add_run(job, base + timedelta(hours=1), RunState.DEAD, attempt=3, error="Traceback...\n" + "x" * 200)
    skipped = add_run(job, base + timedelta(hours=2), RunState.SKIPPED, reason="coalesced")
    manual = add_run(job, base + timedelta(hours=3), RunState.QUEUED, trigger=Trigger.MANUAL)

    rows = table_rows(run("jobs", "runs", str(job.id)))

    assert [int(row[0]) for row in rows] == [manual.id, skipped.id, failed.id, ok.id]
    assert rows[0][1:5] == ["2024-01-01 03:00:00Z", "manual", "queued", "1"]
    assert rows[1][5] == "coalesced"
    assert rows[2][5].startswith("Traceback... xxx") and rows[2][5].endswith("…") and len(rows[2][5]) == 60
    assert rows[3][5:] == ["-", "2024-01-01 00:00:00Z", "2024-01-01 00:00:03Z"]
    assert [int(r[0]) for r in table_rows(run("jobs", "runs", "acme/nightly", "--state", "dead"))] == [failed.id]
    assert [int(r[0]) for r in table_rows(run("jobs", "runs", str(job.id), "--limit", "2"))] == [manual.id, skipped.id]
    assert run("jobs", "runs", str(job.id), "--state", "running").strip() == "(no runs)"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["show", "999999"], "jobs show: job: no job '999999'"),
        (["show", "acme/missing"], "jobs show: job: no job 'acme/missing'"),
        (["show", "nightly"], "jobs show: job: 'nightly' is neither a job id nor TENANT/NAME"),
        (["pause", "999999"], "jobs pause: job: no job '999999'"),
        (["resume", "999999"], "jobs resume: job: no job '999999'"),
        (["trigger", "999999"], "jobs trigger: job: no job '999999'"),
        (["preview", "999999"], "jobs preview: job: no job '999999'"),
        (["runs", "acme/nightly", "--state", "exploded"], "jobs runs: state: must be one of pending, queued"),
        (["runs", "acme/nightly", "--limit", "5000"], "jobs runs: limit: must be between 1 and 1000"),
        (
            ["pause", "acme/nightly", "--note", "by \u202enimda"],
            "jobs pause: note: must not contain the character U+202E",
        ),
        (["pause", "acme/nightly", "--note", "a\u2028b"], "jobs pause: note: must not contain the character U+2028"),
    ],
)
def test_unknown_jobs_and_bad_options_name_the_field(acme, argv, expected):
    add_job(acme)
    runs, events = JobRun.objects.count(), AuditEvent.objects.count()

    error = fails("jobs", *argv)

    assert str(error).startswith(expected) and error.returncode == 2
    assert (JobRun.objects.count(), AuditEvent.objects.count()) == (runs, events)


# --- pause / resume / trigger ---------------------------------------------------------


def test_pause_and_resume(acme):
    job = add_job(acme, every=60)

    first = run("jobs", "pause", str(job.id), "--note", "db migration")
    again = run("jobs", "pause", "acme/nightly")
    job.refresh_from_db()
    assert (job.enabled, job.paused_note, job.version) == (False, "db migration", 2)
    assert first.strip() == f"Paused job {job.id} (acme/nightly)."
    assert again.strip() == f"Job {job.id} (acme/nightly) was already paused."

    resumed = run("jobs", "resume", "acme/nightly")
    job.refresh_from_db()
    assert (job.enabled, job.paused_note, job.version) == (True, "", 3)
    assert job.next_run_at > db_now() - timedelta(seconds=1)
    assert resumed.strip() == (
        f"Resumed job {job.id} (acme/nightly); next run at {job.next_run_at:%Y-%m-%d %H:%M:%S}Z."
    )
    assert "was not paused" in run("jobs", "resume", str(job.id))
    assert list(AuditEvent.objects.filter(job=job).order_by("id").values_list("action", "actor")) == [
        ("job.created", ""),
        ("job.paused", "cli"),
        ("job.resumed", "cli"),
    ]


def test_trigger_records_a_queued_manual_run_published_after_commit(acme, django_capture_on_commit_callbacks):
    job = add_job(acme)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        out = run("jobs", "trigger", "acme/nightly")

    run_ = JobRun.objects.get()
    assert (run_.job_id, run_.trigger, run_.state, run_.attempt) == (job.id, "manual", "queued", 1)
    assert out.startswith(f"Triggered job {job.id} (acme/nightly): run {run_.id} (queued, manual) at ")
    assert len(callbacks) == 1  # the publish, held until commit
    assert AuditEvent.objects.get(action="job.triggered").actor == "cli"


def test_trigger_publishes_to_the_broker(acme, django_capture_on_commit_callbacks):
    queue = f"test-{uuid.uuid4().hex[:10]}"
    job = add_job(acme, queue=queue)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run("jobs", "trigger", str(job.id))
    finally:
        messages = take_broker_messages(queue)

    run_ = JobRun.objects.get()
    assert [m["headers"]["id"] for m in messages] == [f"cronfleet-run-{run_.id}-1"]


@pytest.mark.django_db(transaction=True)
def test_trigger_says_which_run_was_not_published_when_the_broker_fails(monkeypatch):
    job = add_job(services.tenant_create(slug="acme"))

    def broker_down(messages):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr("scheduler_app.services.jobs.publish_runs", broker_down)
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("jobs", "trigger", str(job.id), stdout=out)

    run_ = JobRun.objects.get()  # recorded, committed, still queued for a later publish
    assert run_.state == "queued"
    assert out.getvalue().startswith(f"Triggered job {job.id}")
    assert str(caught.value) == (
        f"jobs trigger: publish: run {run_.id} is recorded but was not sent to the "
        "broker (Error 111 connecting to 127.0.0.1:6379. Connection refused.)"
    )
    assert caught.value.returncode == 1


# --- preview --------------------------------------------------------------------------


def test_preview_a_saved_job_in_its_zone_and_utc(tokyo):
    job = add_job(tokyo, cron="0 9 * * *")

    out = run("jobs", "preview", str(job.id), "-n", "3")

    assert out.splitlines()[0] == f"next 3 fires of job {job.id} (tokyo/nightly): cron 0 9 * * * (Asia/Tokyo):"
    rows = table_rows(out)
    assert [row[0] for row in rows] == ["1", "2", "3"]
    assert all(row[1].endswith("09:00:00 JST") and row[2].endswith("00:00:00Z") for row in rows)
    assert rows[0][2] == f"{job.next_run_at:%Y-%m-%d %H:%M:%S}Z"


def test_preview_an_unsaved_cron_or_interval(db):
    cron = run("jobs", "preview", "--cron", "0 9 * * *", "--timezone", "Asia/Kolkata", "-n", "2")
    every = run("jobs", "preview", "--every", "3600", "-n", "4")

    assert cron.splitlines()[0] == "next 2 fires of cron 0 9 * * * (Asia/Kolkata):"
    assert [row[1][11:] for row in table_rows(cron)] == ["09:00:00 IST"] * 2
    assert [row[2][11:] for row in table_rows(cron)] == ["03:30:00Z"] * 2
    # A UTC schedule: one time per fire, no second UTC column.
    assert every.splitlines()[1].split() == ["#", "UTC"]
    fires = [datetime.strptime(row[1], "%Y-%m-%d %H:%M:%S UTC") for row in table_rows(every)]
    assert [b - a for a, b in zip(fires, fires[1:])] == [timedelta(hours=1)] * 3
    assert Job.objects.count() == 0


def test_preview_of_a_finished_one_off(acme):
    job = add_job(acme, at=db_now() - timedelta(minutes=1))

    assert "(no fires left)" in run("jobs", "preview", str(job.id))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "jobs preview: schedule: give JOB, or --cron EXPR, or --every SECONDS"),
        (["acme/nightly", "--cron", "@daily"], "jobs preview: schedule: give JOB, or --cron"),
        (["--cron", "0 0 31 2 *"], "jobs preview: cron: Bad day-of-month in '0 0 31 2 *'"),
        (["--cron", "@daily", "--timezone", "Moon/Base"], "jobs preview: timezone: unknown time zone 'Moon/Base'"),
        (["--every", "-5"], "jobs preview: every: must be between 1 and"),
        (["--every", "60", "-n", "0"], "jobs preview: count: must be between 1 and 1000"),
        (["acme/nightly", "--timezone", "UTC"], "jobs preview: timezone: applies to --cron only"),
    ],
)
def test_preview_refuses_bad_input(acme, argv, expected):
    add_job(acme)

    error = fails("jobs", "preview", *argv)

    assert str(error).startswith(expected) and error.returncode == 2


def test_preview_from_a_start_instant_as_the_api_does(db):
    out = run(
        "jobs",
        "preview",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--start",
        "2030-03-29T00:00:00Z",
        "-n",
        "3",
    )

    assert out.splitlines()[0] == "next 3 fires of cron 30 2 * * * (Europe/Berlin), from 2030-03-29 00:00:00Z:"
    rows = table_rows(out)
    assert [row[1] for row in rows] == [
        "2030-03-29 02:30:00 CET",
        "2030-03-30 02:30:00 CET",
        "2030-03-31 03:00:00 CEST",
    ]
    # 02:30 does not exist on the day clocks go forward: the fire comes right after the gap.
    assert [row[3] for row in rows[:2]] == ["-", "-"] and rows[2][3].startswith("dst_gap: ")
    assert out.splitlines()[1].split() == ["#", "Europe/Berlin", "UTC", "note"]


def test_preview_an_interval_counted_from_its_start(db):
    out = run("jobs", "preview", "--every", "5400", "--start", "2030-01-01T00:00:00Z", "--end", "2030-01-01T03:00:00Z")

    assert [row[1] for row in table_rows(out)] == [
        "2030-01-01 00:00:00 UTC",
        "2030-01-01 01:30:00 UTC",
        "2030-01-01 03:00:00 UTC",
    ]


def test_preview_a_saved_job_from_a_start_instant(tokyo):
    job = add_job(tokyo, cron="0 9 * * *")

    out = run("jobs", "preview", str(job.id), "--start", "2030-01-01T00:00:00Z", "-n", "2")

    assert out.splitlines()[0].endswith(", from 2030-01-01 00:00:00Z:")
    assert [row[2] for row in table_rows(out)] == ["2030-01-01 00:00:00Z", "2030-01-02 00:00:00Z"]
    assert str(fails("jobs", "preview", str(job.id), "--end", "2030-01-01T00:00:00Z")) == (
        "jobs preview: end_at: applies to --cron or --every; a saved job keeps its own end"
    )
    assert str(fails("jobs", "preview", str(job.id), "--start", "2030-01-01")).startswith(
        "jobs preview: start_at: '2030-01-01' has no UTC offset"
    )
