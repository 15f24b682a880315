"""A job pauses itself after repeated failure (Job.pause_after_failures, ledger.autopause):
its runs' ends count (failed or dead add one, a success resets), a job without the setting
pays nothing, the pause names its runs and raises one alert, and resume starts afresh; the
API, the CLI and the dashboard show it. Real processes: the system tier's test_autopause."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from scheduler_app import alerts, services
from scheduler_app.dispatch import recovery
from scheduler_app.ledger import autopause
from scheduler_app.models import Alert, AlertRule, AuditEvent, Job, JobRun, RunState, db_now
from scheduler_app.observability import dashboard
from scheduler_app.worker import execution, transitions
from tests.conftest import NOW

FAIL, ECHO = "scheduler_app.fail", "scheduler_app.echo"


def run_once(job: Job, *, seconds: int, task: str | None = None, attempt: int = 1) -> str:
    """One queued run of `job` (fired `seconds` after NOW) through the worker's code; its state."""
    if task is not None:
        Job.objects.filter(id=job.id).update(task_name=task)
    run = JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=NOW + timedelta(seconds=seconds),
        created_at=NOW,
        state=RunState.QUEUED,
        attempt=attempt,
    )
    return execution.execute_run(run.id, attempt, worker="w").state


def ctid(job: Job) -> str:
    """The job row's physical place: an UPDATE of the row, even one that changes nothing, moves it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT ctid::text FROM scheduler_app_job WHERE id = %s", [job.id])
        return cursor.fetchone()[0]


def test_a_job_pauses_itself_after_exactly_n_failed_or_dead_runs(make_job):
    job = make_job(task_name=FAIL, max_attempts=1, pause_after_failures=3)

    states = [run_once(job, seconds=i) for i in range(2)]
    job.refresh_from_db()
    assert states == ["dead", "dead"] and (job.consecutive_failures, job.enabled) == (2, True)

    assert run_once(job, seconds=2) == "dead"
    job.refresh_from_db()
    runs = sorted(JobRun.objects.filter(job=job, state=RunState.DEAD).values_list("id", flat=True))
    assert (job.enabled, job.consecutive_failures, job.version) == (False, 3, 2)
    assert job.auto_paused_at is not None
    assert job.paused_note.startswith(
        f"paused after 3 failed or dead runs in a row: runs {runs[0]}, {runs[1]}, {runs[2]} (last: dead: RuntimeError: "
    )
    event = AuditEvent.objects.get(job=job, action="job.auto_paused")
    assert event.detail["runs"] == runs and event.actor == "worker:w"
    # The fire that was due and unclaimed is recorded as skipped, as a pause by hand does.
    assert JobRun.objects.get(job=job, state=RunState.SKIPPED).reason.startswith("paused: due at")


def test_a_success_resets_the_count_and_retrying_runs_do_not_count(make_job):
    job = make_job(task_name=FAIL, max_attempts=1, pause_after_failures=3)
    for i in range(2):
        run_once(job, seconds=i)
    assert run_once(job, seconds=2, task=ECHO) == "succeeded"
    job.refresh_from_db()
    assert job.consecutive_failures == 0

    Job.objects.filter(id=job.id).update(max_attempts=5)
    assert run_once(job, seconds=3, task=FAIL) == "retrying"  # not a final failure
    job.refresh_from_db()
    assert job.consecutive_failures == 0

    Job.objects.filter(id=job.id).update(max_attempts=1)
    for i in range(4, 6):
        run_once(job, seconds=i)
    job.refresh_from_db()
    assert (job.consecutive_failures, job.enabled) == (2, True)  # two, not four: the success reset it
    run_once(job, seconds=6)
    job.refresh_from_db()
    assert (job.consecutive_failures, job.enabled) == (3, False)


def test_a_job_without_the_setting_never_pauses_and_its_row_is_not_written(make_job):
    job = make_job(task_name=FAIL, max_attempts=1)
    place, version, updated_at = ctid(job), job.version, job.updated_at
    run_once(job, seconds=0)  # prepares the statements

    before = next(transitions.STATEMENTS)
    with CaptureQueriesContext(connection) as queries:
        states = [run_once(job, seconds=i) for i in range(1, 6)]
    sent = next(transitions.STATEMENTS) - before - 1

    job.refresh_from_db()
    assert states == ["dead"] * 5 and job.enabled and job.consecutive_failures == 0
    assert (ctid(job), job.version, job.updated_at) == (place, version, updated_at)
    assert sent == 10  # a start and an end per run, nothing more
    assert not [
        q["sql"]
        for q in queries
        if "UPDATE" in q["sql"] and "scheduler_app_job" in q["sql"] and "scheduler_app_jobrun" not in q["sql"]
    ]


def test_a_success_leaves_a_job_row_with_a_count_of_0_alone(make_job):
    job = make_job(pause_after_failures=3)
    place = ctid(job)

    assert run_once(job, seconds=0) == "succeeded"

    assert ctid(job) == place


def test_runs_of_a_batch_count_in_the_order_they_ended(make_job):
    job = make_job(task_name=FAIL, max_attempts=1, batch=True, pause_after_failures=2)
    other = make_job(task_name=FAIL, max_attempts=1, batch=True, pause_after_failures=5)
    runs = [
        JobRun.objects.create(
            job=j, tenant=j.tenant, scheduled_at=NOW + timedelta(seconds=i), created_at=NOW, state=RunState.QUEUED
        )
        for i, j in enumerate([job, other, job, other])
    ]

    outcomes = execution.execute_runs([(run.id, 1) for run in runs], worker="w")

    assert [o.state for o in outcomes] == ["dead"] * 4
    job.refresh_from_db()
    other.refresh_from_db()
    assert (job.enabled, job.consecutive_failures) == (False, 2)
    assert (other.enabled, other.consecutive_failures) == (True, 2)
    assert autopause.tallies([(1, "dead"), (1, "succeeded"), (1, "failed"), (2, "retrying"), (2, "skipped")]) == {
        1: (True, 1)
    }


def test_a_lost_run_on_its_last_attempt_counts_in_the_beat(make_job):
    job = make_job(max_attempts=1, pause_after_failures=1)
    now = db_now()
    JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=NOW,
        created_at=NOW,
        state=RunState.RUNNING,
        worker="gone",
        started_at=now - timedelta(minutes=5),
        lease_expires_at=now - timedelta(minutes=1),
    )

    assert recovery.mark_lost_runs(now, limit=100) == 1

    job.refresh_from_db()
    assert job.enabled is False and "(last: dead: lost: lease expired (worker gone))" in job.paused_note
    assert AuditEvent.objects.get(job=job, action="job.auto_paused").actor == "beat"


def auto_paused(job: Job) -> Job:
    Job.objects.filter(id=job.id).update(consecutive_failures=job.pause_after_failures)
    assert autopause.auto_pause(job.id, actor="test")
    job.refresh_from_db()
    return job


def test_resume_clears_the_count_and_when_it_paused_itself(make_job):
    job = auto_paused(make_job(task_name=FAIL, max_attempts=1, pause_after_failures=2))

    job = services.job_resume(job, actor="test")

    assert (job.enabled, job.consecutive_failures, job.auto_paused_at, job.paused_note) == (True, 0, None, "")
    assert AuditEvent.objects.get(job=job, action="job.resumed").detail["auto_paused_at"]
    run_once(job, seconds=0)
    job.refresh_from_db()
    assert (job.enabled, job.consecutive_failures) == (True, 1)  # counts afresh, not from 2


def test_an_auto_pause_raises_one_alert_on_the_jobs_rule_each_time(make_job):
    job = make_job(task_name=FAIL, max_attempts=1, pause_after_failures=2)
    rule = alerts.rule_set(job, {"emails": ["ops@example.com"], "cooldown_seconds": 3600}, actor="test")
    job = auto_paused(job)

    now = db_now()
    assert alerts.evaluate_due_rules(now) == 1
    AlertRule.objects.filter(id=rule.id).update(next_check_at=now)
    assert alerts.evaluate_due_rules(now + timedelta(seconds=1)) == 0  # once per pause

    alert = Alert.objects.get()
    assert alert.kind == alerts.AUTO_PAUSED and alert.next_delivery_at is not None
    assert alert.message == f"{job.paused_note} — job {job}" and alert.detail["consecutive_failures"] == 2

    # Resumed, it pauses itself again: a second alert, not held back by the cool-down.
    services.job_resume(job)
    auto_paused(job)
    AlertRule.objects.filter(id=rule.id).update(next_check_at=db_now())
    assert alerts.evaluate_due_rules(db_now()) == 1
    assert Alert.objects.filter(kind=alerts.AUTO_PAUSED).count() == 2

    # The alert lists filter by the kind as by any other.
    out = StringIO()
    call_command("alerts", "list", "--kind", "auto_paused", stdout=out)
    assert [line.split()[4] for line in out.getvalue().splitlines()[2:]] == ["auto_paused", "auto_paused"], (
        out.getvalue()
    )
    assert job.paused_note == "paused after 2 failed or dead runs in a row"  # this test made no runs to name
    call_command("alerts", "list", "--kind", "failed", stdout=(none := StringIO()))
    assert str(job) not in none.getvalue()


@pytest.fixture
def api(tenant) -> APIClient:
    _, raw = services.apikey_create(tenant=tenant, name="test key")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def body(**fields) -> dict:
    return {"name": "nightly", "schedule": {"every": 300}, "target": {"kind": "task", "task": ECHO}, **fields}


@pytest.mark.parametrize("value", [0, -1, "3", True, 1001, 2.5])
def test_the_api_refuses_a_bad_pause_after_failures_naming_it(api, value):
    response = api.post("/api/v1/jobs/", body(pause_after_failures=value), format="json")

    assert response.status_code == 400, response.json()
    assert [error["field"] for error in response.json()["errors"]] == ["pause_after_failures"]


def test_the_api_sets_and_clears_pause_after_failures_and_shows_the_count(api):
    created = api.post("/api/v1/jobs/", body(pause_after_failures=3), format="json")
    assert created.status_code == 201, created.json()
    job = created.json()
    assert (job["pause_after_failures"], job["consecutive_failures"], job["auto_paused_at"]) == (3, 0, None)

    edited = api.patch(f"/api/v1/jobs/{job['id']}/", {"description": "kept"}, format="json")
    assert edited.json()["pause_after_failures"] == 3  # an edit of another field keeps it
    Job.objects.filter(id=job["id"]).update(consecutive_failures=2)
    assert (
        api.patch(f"/api/v1/jobs/{job['id']}/", {"description": "again"}, format="json").json()["consecutive_failures"]
        == 2
    )
    raised = api.patch(f"/api/v1/jobs/{job['id']}/", {"pause_after_failures": 5}, format="json")
    assert raised.json()["consecutive_failures"] == 0  # a new threshold counts from now
    cleared = api.patch(f"/api/v1/jobs/{job['id']}/", {"pause_after_failures": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["pause_after_failures"] is None

    refused = api.patch(f"/api/v1/jobs/{job['id']}/", {"consecutive_failures": 0}, format="json")
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "consecutive_failures"

    paused = auto_paused(_with_setting(job["id"]))
    shown = api.get(f"/api/v1/jobs/{job['id']}/").json()
    assert shown["enabled"] is False and shown["auto_paused_at"] and shown["consecutive_failures"] == 2
    assert shown["paused_note"] == paused.paused_note


def _with_setting(job_id: int) -> Job:
    Job.objects.filter(id=job_id).update(pause_after_failures=2)
    return Job.objects.get(id=job_id)


def test_jobs_list_and_show_tell_a_job_that_paused_itself_from_one_paused_by_hand(make_job):
    auto = auto_paused(make_job(name="flaky", pause_after_failures=1))
    services.job_pause(make_job(name="held"), note="maintenance")
    make_job(name="running")

    out = StringIO()
    call_command("jobs", "list", stdout=out)
    status = {line.split()[2]: line for line in out.getvalue().splitlines()[2:]}
    assert "paused (auto)" in status["flaky"]
    assert "paused" in status["held"] and "auto" not in status["held"]
    assert "enabled" in status["running"]

    out = StringIO()
    call_command("jobs", "show", str(auto.id), stdout=out)
    assert "paused (auto)" in out.getvalue() and "consecutive_failures" in out.getvalue()


def test_the_cli_sets_and_clears_pause_after_failures(tenant):
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "cli",
        "--every",
        "300",
        "--task",
        ECHO,
        "--pause-after-failures",
        "4",
        stdout=StringIO(),
    )
    job = Job.objects.get(name="cli")
    assert job.pause_after_failures == 4

    call_command("jobs", "edit", str(job.id), "--pause-after-failures", "none", "--yes", stdout=StringIO())
    job.refresh_from_db()
    assert job.pause_after_failures is None

    with pytest.raises(Exception, match="pause_after_failures"):
        call_command("jobs", "edit", str(job.id), "--pause-after-failures", "0", "--yes", stdout=StringIO())


def test_the_dashboard_lists_the_jobs_that_paused_themselves(make_job, admin_client):
    auto = auto_paused(make_job(name="flaky", pause_after_failures=1))
    services.job_pause(make_job(name="held"), note="maintenance")

    found = dashboard.overview(db_now())
    assert found.auto_paused_count == 1 and [row[0] for row in found.auto_paused] == [auto.id]

    page = admin_client.get("/admin/dashboard/").content.decode()
    assert "1 auto-paused" in page and f"/admin/scheduler_app/job/{auto.id}/change/" in page
    listed = admin_client.get("/admin/scheduler_app/job/?paused=auto").content.decode()
    assert "flaky" in listed and "held" not in listed and "paused (auto)" in listed
