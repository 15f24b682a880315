"""Check-ins: monitored jobs run elsewhere and ping /ping/<key>. The ping forms and what each
records, the body's bound, unknown keys, the rate limit, two pings racing for one run, the
crontab import and alert rules on check-in runs. A real beat with a cron-like loop that pings,
misses, fails and recovers: tests/system/dispatch/test_checkins.py."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import F
from django.test import Client
from prometheus_client import REGISTRY

from scheduler_app import alerts, dispatch, services
from scheduler_app.models import (
    STARTED_REASON,
    WAITING_REASON,
    Alert,
    AlertKind,
    AlertRule,
    Job,
    JobRun,
    RunState,
    Tenant,
    db_now,
)
from scheduler_app.services.checkins import BODY_LIMIT
from tests.conftest import take_broker_messages, wait_for

GRACE = timedelta(minutes=10)  # the beat's misfire grace (not a monitored job's)


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="ops", name="Ops")


def monitored(tenant: Tenant, name: str = "backup", *, grace: int = 300, queue: str = "", **spec) -> Job:
    spec.setdefault("cron", "* * * * *")
    return services.job_create(
        tenant,
        services.JobSpec(name=name, target_kind="monitor", monitor={"grace_seconds": grace}, queue=queue, **spec),
    )


def key_of(job: Job) -> str:
    return str(Job.objects.get(id=job.id).monitor.ping_key)


def fire_now(job: Job) -> JobRun:
    """Make the job due and run one beat turn: its fire is recorded, waiting for a ping. The
    fire is on the minute, as a cron job's are: one a second before now could be followed by
    the next minute's, also due, when now is in a minute's first second."""
    now = db_now()
    Job.objects.filter(id=job.id).update(next_run_at=now.replace(second=0, microsecond=0))
    dispatch.run_turn(db_now(), batch_size=100, grace=GRACE)
    return JobRun.objects.filter(job=job).order_by("-scheduled_at").first()


def ping(client: Client, key: str, action: str = "", *, body: bytes | None = None):
    path = f"/ping/{key}" + (f"/{action}" if action else "")
    if body is None:
        return client.get(path)
    return client.post(path, data=body, content_type="text/plain")


def test_a_beat_turn_records_a_monitored_fire_waiting_for_its_ping_and_publishes_nothing(tenant, queue_name):
    job = monitored(tenant, queue=queue_name)
    run = fire_now(job)
    assert (run.state, run.reason, run.started_at, run.finished_at) == (RunState.PENDING, WAITING_REASON, None, None)
    assert take_broker_messages(queue_name) == []


def test_start_then_success_records_the_duration_and_the_body(tenant):
    job, client = monitored(tenant), Client()
    run = fire_now(job)
    assert ping(client, key_of(job), "start").status_code == 200
    run.refresh_from_db()
    assert (run.state, run.reason) == (RunState.RUNNING, STARTED_REASON) and run.started_at is not None
    answer = ping(client, key_of(job), body=b"backup done: 42 files")
    assert answer.status_code == 200 and answer.content == b"OK\n"
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and run.result == "backup done: 42 files"
    assert run.finished_at > run.started_at
    assert JobRun.objects.filter(job=job).count() == 1


def test_a_started_check_in_takes_no_place_of_the_tenants_concurrent_runs(tenant, queue_name):
    Tenant.objects.filter(id=tenant.id).update(max_concurrent_runs=1)
    job, client = monitored(tenant), Client()
    fire_now(job)
    assert ping(client, key_of(job), "start").status_code == 200  # the backup runs elsewhere, for hours
    own = services.job_create(
        tenant, services.JobSpec(name="report", task_name="scheduler_app.echo", cron="0 0 * * *", queue=queue_name)
    )

    run = fire_now(own)

    assert (run.state, run.reason) == (RunState.QUEUED, "")
    assert len(take_broker_messages(queue_name)) == 1


@pytest.mark.parametrize("policy", ["skip", "buffer_one", "replace"])
def test_a_monitored_job_takes_only_the_allow_overlap_policy(tenant, policy):
    with pytest.raises(services.InvalidInput) as refused:
        monitored(tenant, overlap_policy=policy)

    assert refused.value.field == "overlap_policy" and "runs elsewhere" in str(refused.value)
    assert not Job.objects.filter(tenant=tenant).exists()


def test_fail_and_exit_statuses_end_the_open_run_and_a_ping_without_one_records_its_own(tenant):
    job, client = monitored(tenant), Client()
    first = fire_now(job)
    assert ping(client, key_of(job), "fail", body=b"disk full").status_code == 200
    first.refresh_from_db()
    assert (first.state, first.reason, first.result) == (RunState.FAILED, "checkin: /fail", "disk full")
    assert first.started_at == first.finished_at  # no /start: no duration

    # No open run left: each ping records a run of its own, at its time.
    assert ping(client, key_of(job), "3").status_code == 200
    assert ping(client, key_of(job), "0").status_code == 200
    own = list(JobRun.objects.filter(job=job).exclude(id=first.id).order_by("scheduled_at"))
    assert [(run.state, run.reason) for run in own] == [
        (RunState.FAILED, "checkin: failed with exit status 3"),
        (RunState.SUCCEEDED, ""),
    ]
    assert all(run.scheduled_at == run.started_at == run.finished_at for run in own)
    assert ping(client, key_of(job), "256").status_code == 404


def test_a_long_body_is_cut_at_the_bound_and_the_run_says_so(tenant):
    job, client = monitored(tenant), Client()
    run = fire_now(job)
    ping(client, key_of(job), body=b"x" * (BODY_LIMIT + 500))
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and len(run.result) == BODY_LIMIT
    assert run.reason == f"checkin: body cut to its first {BODY_LIMIT} bytes"


def test_unknown_keys_and_unknown_forms_answer_404_alike_and_change_nothing(tenant):
    job, client = monitored(tenant), Client()
    run = fire_now(job)
    answers = [
        ping(client, str(uuid.uuid4())),
        ping(client, "not-a-uuid"),
        ping(client, key_of(job), "bogus"),
        ping(client, str(uuid.uuid4()), "start"),
    ]
    assert {(answer.status_code, answer.content) for answer in answers} == {(404, b"not found\n")}
    run.refresh_from_db()
    assert run.state == RunState.PENDING


def test_a_key_touches_only_its_own_jobs_runs(tenant):
    other = services.tenant_create(slug="other", name="Other")
    mine, theirs = monitored(tenant), monitored(other)
    mine_run, their_run = fire_now(mine), fire_now(theirs)
    ping(Client(), key_of(mine))
    mine_run.refresh_from_db(), their_run.refresh_from_db()
    assert (mine_run.state, their_run.state) == (RunState.SUCCEEDED, RunState.PENDING)
    assert JobRun.objects.filter(tenant=other).count() == 1


def test_pings_over_the_keys_limit_are_refused_with_429(tenant, settings):
    settings.CRONFLEET_PING_REQUESTS_PER_MINUTE = 3
    job, client = monitored(tenant), Client()
    codes = [ping(client, key_of(job)).status_code for _ in range(8)]
    # A window may end between two pings (it counts afresh): at most twice the limit pass.
    assert 429 in codes and codes.count(200) <= 6
    refused = codes.index(429)
    assert codes[:refused] == [200] * refused
    assert JobRun.objects.filter(job=job).count() == codes.count(200)
    assert int(ping(client, key_of(job)).headers.get("Retry-After", "1")) >= 1


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("cronfleet_pings_dropped_total", {"reason": reason}) or 0.0


def test_a_job_records_at_most_its_bound_of_runs_of_its_own_an_hour_and_its_fires_are_still_closed(tenant, settings):
    settings.CRONFLEET_PING_OWN_RUNS_PER_HOUR = 3
    settings.CRONFLEET_PING_REQUESTS_PER_MINUTE = 1000
    job, client = monitored(tenant), Client()
    before = dropped("own_runs")

    answers = [ping(client, key_of(job), body=f"run {n}".encode()) for n in range(5)]

    assert [(answer.status_code, answer.content) for answer in answers[:3]] == [(200, b"OK\n")] * 3
    assert {answer.status_code for answer in answers[3:]} == {200}
    assert all(
        answer.content.startswith(b"not recorded: this job recorded 3 runs of its own") for answer in answers[3:]
    )
    assert sorted(JobRun.objects.filter(job=job).values_list("result", flat=True)) == ["run 0", "run 1", "run 2"]
    assert dropped("own_runs") - before == 2
    metrics_page = Client().get("/metrics").content.decode()
    assert 'cronfleet_pings_dropped_total{reason="own_runs"}' in metrics_page
    # A fire is closed by its ping whatever the bound: only runs of its own are dropped.
    fire_now(job)
    fire = JobRun.objects.filter(job=job, state=RunState.PENDING).latest("scheduled_at")
    assert ping(client, key_of(job), body=b"on time").content == b"OK\n"
    fire.refresh_from_db()
    assert (fire.state, fire.result) == (RunState.SUCCEEDED, "on time")
    # The hour is the window: runs of its own older than an hour leave it.
    JobRun.objects.filter(job=job).exclude(id=fire.id).update(
        scheduled_at=F("scheduled_at") - timedelta(hours=1), created_at=F("created_at") - timedelta(hours=1)
    )
    runs = JobRun.objects.filter(job=job).count()
    assert ping(client, key_of(job), body=b"later").content == b"OK\n"
    assert JobRun.objects.filter(job=job).count() == runs + 1


def test_pings_of_an_inactive_tenant_answer_404_and_record_nothing(tenant):
    job, client = monitored(tenant), Client()
    fire = fire_now(job)
    Tenant.objects.filter(id=tenant.id).update(is_active=False)  # moved to another cell, say

    answers = [ping(client, key_of(job)), ping(client, key_of(job), "start"), ping(client, key_of(job), "fail")]

    assert {(answer.status_code, answer.content) for answer in answers} == {(404, b"not found\n")}
    fire.refresh_from_db()
    assert fire.state == RunState.PENDING
    assert JobRun.objects.filter(job=job).count() == 1
    with pytest.raises(services.UnknownKey):
        services.record_ping(key_of(job))


def test_a_run_of_its_own_at_an_instant_already_taken_is_answered_as_that_run(tenant):
    # Two pings that found no open fire read the same clock: the second's run would break
    # jobrun_one_per_fire (job, scheduled_at). It is the first's duplicate, not an error.
    job = monitored(tenant)
    now = db_now()
    first = services.record_ping(key_of(job), "", b"first", now=now)

    second = services.record_ping(key_of(job), "fail", b"second", now=now)

    assert first.recorded and not first.duplicate
    assert (second.run_id, second.state, second.recorded, second.duplicate) == (
        first.run_id,
        RunState.SUCCEEDED,
        False,
        True,
    )
    assert list(JobRun.objects.filter(job=job).values_list("result", flat=True)) == ["first"]
    assert ping(Client(), key_of(job)).status_code == 200  # the ping's transaction is still usable


@pytest.mark.django_db(transaction=True)
def test_a_flood_of_pings_at_once_records_no_more_than_the_bound(tenant, settings):
    settings.CRONFLEET_PING_OWN_RUNS_PER_HOUR = 3
    job = monitored(tenant)
    key = key_of(job)
    results, errors = [], []

    def one() -> None:
        try:
            results.append(services.record_ping(key))
        except Exception as exc:  # reported below, with the test's failure
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert len(results) == 8 and sum(result.run_id is not None for result in results) == 3
    assert JobRun.objects.filter(job=job).count() == 3


@pytest.mark.django_db(transaction=True)
def test_two_pings_at_once_close_the_open_run_once(tenant):
    job = monitored(tenant)
    fire = fire_now(job)
    key = key_of(job)
    settings = connection.settings_dict
    # A third connection holds the run's row while both pings read it open and try to
    # close it: each waits on the row, then one wins and the other finds it closed.
    server = dict(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"] or "postgres",
        dbname=settings["NAME"],
    )
    holder, watcher = psycopg.connect(**server), psycopg.connect(**server, autocommit=True)
    holder.execute("SELECT 1 FROM scheduler_app_jobrun WHERE id = %s FOR UPDATE", [fire.id])
    results, errors = [], []

    def one(body: bytes) -> None:
        try:
            results.append(services.record_ping(key, "", body))
        except Exception as exc:  # reported below, with the test's failure
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(body,)) for body in (b"first", b"second")]
    for thread in threads:
        thread.start()
    try:
        wait_for(
            lambda: (
                watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()[0]
                >= 2
            ),
            timeout=30,
            what="both pings waiting on the run's row",
        )
    finally:
        holder.rollback()
        holder.close()
        watcher.close()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len({ping.run_id for ping in results}) == 2, results  # never the same run twice
    assert sorted(ping.recorded for ping in results) == [False, True], results
    fire.refresh_from_db()
    assert fire.state == RunState.SUCCEEDED and fire.result in ("first", "second")
    assert JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count() == 2


def test_the_beat_ends_a_run_with_no_ping_within_its_grace_as_missed(tenant):
    job, other = monitored(tenant, grace=60), monitored(tenant, "inside-grace", grace=600)
    waiting, inside = fire_now(job), fire_now(other)
    JobRun.objects.filter(id=waiting.id).update(scheduled_at=db_now() - timedelta(seconds=61))
    result = dispatch.run_turn(db_now(), batch_size=100, grace=GRACE)
    waiting.refresh_from_db(), inside.refresh_from_db()
    assert result.missed == 1
    assert (waiting.state, waiting.reason) == (RunState.FAILED, "missed: no check-in within 60 s")
    assert waiting.error == waiting.reason and waiting.finished_at is not None
    assert inside.state == RunState.PENDING
    # A started run must succeed within the grace of its start.
    started = fire_now(other)
    ping(Client(), key_of(other), "start")
    JobRun.objects.filter(id=started.id).update(started_at=db_now() - timedelta(seconds=601))
    dispatch.run_turn(db_now(), batch_size=100, grace=GRACE)
    started.refresh_from_db()
    assert (started.state, started.reason) == (RunState.FAILED, "missed: no success within 600 s of its start")


def test_alert_rules_see_check_in_runs_late_long_and_failed(tenant, settings):
    settings.CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS = 0
    job, client = monitored(tenant), Client()
    now = db_now()
    rule = alerts.rule_set(
        job, {"on_failure": True, "max_start_lag_seconds": 60, "max_duration_seconds": 30, "cooldown_seconds": 0}
    )
    AlertRule.objects.filter(id=rule.id).update(checked_until=now - timedelta(hours=1), next_check_at=now)
    late = fire_now(job)
    JobRun.objects.filter(id=late.id).update(scheduled_at=now - timedelta(seconds=200))  # pinged well after its fire
    ping(client, key_of(job), "start")
    JobRun.objects.filter(id=late.id).update(started_at=db_now() - timedelta(seconds=45))  # and ran 45 s
    ping(client, key_of(job), "fail")
    assert alerts.evaluate_due_rules(db_now()) == 3
    kinds = set(Alert.objects.filter(job=job, run_id=late.id).values_list("kind", flat=True))
    assert kinds == {AlertKind.START_LAG, AlertKind.TOO_LONG, AlertKind.FAILED}


# --- the crontab import -----------------------------------------------------------------------

CRONTAB = """\
# m h dom mon dow command
MAILTO=ops@example.com
SHELL=/bin/bash

*/15 * * * * /usr/local/bin/backup.sh --full > /dev/null 2>&1
@daily /opt/reports/nightly.py
30 2 * * 1-5 pg_dump shop | gzip > /backups/shop.sql.gz
"""


def crontab_file(tmp_path, text: str) -> str:
    path = tmp_path / "crontab"
    path.write_text(text)
    return str(path)


def test_import_crontab_makes_monitored_jobs_and_prints_their_ping_urls(tenant, tmp_path):
    out = StringIO()
    call_command(
        "import_crontab", crontab_file(tmp_path, CRONTAB), "--tenant", tenant.slug, "--grace", "120", stdout=out
    )
    jobs = list(Job.objects.filter(tenant=tenant).order_by("id"))
    assert [(job.name, job.cron, job.description) for job in jobs] == [
        ("backup.sh-full", "*/15 * * * *", "/usr/local/bin/backup.sh --full > /dev/null 2>&1"),
        ("nightly.py", "0 0 * * *", "/opt/reports/nightly.py"),
        ("pg_dump-shop", "30 2 * * 1-5", "pg_dump shop | gzip > /backups/shop.sql.gz"),
    ]
    assert {(job.target_kind, job.target_config["grace_seconds"]) for job in jobs} == {("monitor", 120)}
    text = out.getvalue()
    assert "note: line 2: environment setting MAILTO skipped (not a schedule)" in text
    for job in jobs:
        assert f"/ping/{job.monitor.ping_key}" in text


def test_a_bad_crontab_line_is_refused_by_its_number_and_nothing_is_imported(tenant, tmp_path):
    bad = CRONTAB + "61 * * * * echo never\n"
    with pytest.raises(CommandError, match=r"line 8: cron: .*nothing was imported"):
        call_command("import_crontab", crontab_file(tmp_path, bad), "--tenant", tenant.slug, stdout=StringIO())
    short = "* * * * *\n"
    with pytest.raises(CommandError, match="line 1: must be five time fields and a command"):
        call_command("import_crontab", crontab_file(tmp_path, short), "--tenant", tenant.slug, stdout=StringIO())
    assert not Job.objects.filter(tenant=tenant).exists()


def test_jobs_add_monitor_prints_the_check_in_url_and_grace_is_for_monitored_jobs_only(tenant):
    out = StringIO()
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "nightly",
        "--cron",
        "@daily",
        "--monitor",
        "--grace",
        "900",
        stdout=out,
    )
    job = Job.objects.get(tenant=tenant, name="nightly")
    assert (job.target_kind, job.target_config) == ("monitor", {"grace_seconds": 900})
    assert f"check-in URL http://localhost:8000/ping/{job.monitor.ping_key}" in out.getvalue()
    with pytest.raises(CommandError, match="grace: --grace is for monitored jobs only"):
        call_command(
            "jobs",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            "x",
            "--cron",
            "@daily",
            "--task",
            "scheduler_app.echo",
            "--grace",
            "60",
            stdout=StringIO(),
        )


def test_the_api_shows_a_monitored_job_with_its_grace_and_ping_url_and_its_check_in_runs(tenant):
    from rest_framework.test import APIClient  # the API's client, as tests/integration/api/test_api.py uses it

    key = services.apikey_create(tenant=tenant, name="ci")[1]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    made = api.post(
        "/api/v1/jobs/",
        {
            "name": "k8s-cleanup",
            "schedule": {"cron": "*/5 * * * *"},
            "target": {"kind": "monitor", "grace_seconds": 120},
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    job = Job.objects.get(id=made.json()["id"])
    assert made.json()["target"] == {
        "kind": "monitor",
        "grace_seconds": 120,
        "ping_url": f"http://localhost:8000/ping/{job.monitor.ping_key}",
    }
    fire_now(job)
    ping(Client(), key_of(job), body=b"done")
    runs = api.get("/api/v1/runs/", {"job": job.id}).json()["results"]
    assert [(run["state"], run["job"]) for run in runs] == [("succeeded", job.id)]
    bad = api.post(
        "/api/v1/jobs/",
        {"name": "bad", "schedule": {"cron": "@daily"}, "target": {"kind": "monitor", "grace_seconds": 0}},
        format="json",
    )
    assert bad.status_code == 400 and "grace_seconds" in str(bad.json())
