"""Batched runs: many short runs in one message, started by one statement and ended by one,
each run keeping its own row, attempt, result, retries and fencing (against the real
PostgreSQL and Redis; real workers: the system tier's test_batches)."""

import re
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils.dateparse import parse_datetime

from scheduler_app import services
from scheduler_app.dispatch.publish import publish_runs
from scheduler_app.models import Job, JobRun, RunState, db_now
from scheduler_app.worker import execution, transitions
from tests.conftest import NOW, take_broker_messages
from tests.unit.worker.test_batches import message


def test_one_message_carries_a_batch_with_a_time_limit_of_its_runs_sum(queue_name, settings):
    settings.CRONFLEET_RUN_BATCH_SIZE = 2
    publish_runs(
        [
            message(1, queue=queue_name, timeout=7),
            message(2, queue=queue_name, timeout=5),
            message(3, queue=queue_name, timeout=5),
            message(4, queue=queue_name, batch=False),
        ]
    )

    sent = take_broker_messages(queue_name)

    by_task = sorted((m["headers"]["task"], m["args"], m["headers"]["timelimit"][1]) for m in sent)
    assert by_task == [
        ("scheduler_app.execute_run", [4, 1], 10),
        ("scheduler_app.execute_runs", [[[1, 1], [2, 1]]], 12),
        ("scheduler_app.execute_runs", [[[3, 1]]], 5),
    ]


def queued_runs(job, count, *, attempt=1):
    now = db_now()
    return JobRun.objects.bulk_create(
        JobRun(
            job=job,
            tenant=job.tenant,
            scheduled_at=now - timedelta(seconds=i),
            state=RunState.QUEUED,
            attempt=attempt,
            created_at=now,
            enqueued_at=now,
        )
        for i in range(count)
    )


def test_a_batch_is_started_and_ended_by_one_statement_each(make_job):
    ok, failing = make_job(batch=True), make_job(batch=True, task_name="scheduler_app.fail", max_attempts=1)
    runs = queued_runs(ok, 5) + queued_runs(failing, 2)
    stale = queued_runs(make_job(batch=True), 1, attempt=2)[0]  # the message names attempt 1
    pairs = [(run.id, 1) for run in [*runs, stale]]
    execution.execute_run(queued_runs(ok, 1)[0].id, 1, worker="warm")  # prepares the statements

    before = next(transitions.STATEMENTS)
    outcomes = execution.execute_runs(pairs, worker="w1", task_id="t")
    sent = next(transitions.STATEMENTS) - before - 1

    assert [o.state for o in outcomes] == ["succeeded"] * 5 + ["dead"] * 2 + ["duplicate"]
    assert sent == 3  # start the batch, count the duplicate, end the batch
    for run in JobRun.objects.filter(id__in=[r.id for r in runs]):
        assert [(a["attempt"], a["worker"]) for a in run.attempts] == [(1, "w1")]
        assert run.state == ("succeeded" if run.job_id == ok.id else "dead")
        assert run.job_id == failing.id or f'"fire_key": "{run.fire_key}"' in run.result  # its own result
    stale.refresh_from_db()
    assert (stale.state, stale.duplicate_deliveries) == ("queued", 1)


def test_each_run_of_a_batch_is_recorded_as_started_at_its_own_turn(make_job):
    slow = make_job(batch=True, task_name="scheduler_app.sleep", kwargs={"seconds": 0.3})
    runs = queued_runs(slow, 3)

    execution.execute_runs([(run.id, 1) for run in runs], worker="w1")

    done = sorted(JobRun.objects.filter(id__in=[r.id for r in runs]), key=lambda run: run.started_at)
    gaps = [(later.started_at - earlier.started_at).total_seconds() for earlier, later in zip(done, done[1:])]
    assert all(gap >= 0.25 for gap in gaps), gaps  # the batch's start would give 0
    for run in done:  # the attempt's record says the same
        assert parse_datetime(run.attempts[-1]["started_at"]) == run.started_at
        assert run.finished_at >= run.started_at + timedelta(seconds=0.25)


LEDGER, IN_FLIGHT = 60_000, 3000


@pytest.mark.parametrize("step", ["start", "end"])
def test_a_batch_reads_its_runs_by_primary_key_however_many_are_in_flight(make_job, step):
    """The statements' plans when they are not prepared (and a prepared one's first five),
    over a ledger much bigger than the runs in flight: with the expected state a bare
    parameter, the planner read every queued (or running) run through a partial index to
    find the batch's hundred, O(runs in flight) a batch."""
    past = make_job()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_jobrun")  # statistics from before the spike
        cursor.execute(  # a ledger of finished runs beside the runs in flight
            "INSERT INTO scheduler_app_jobrun (job_id, tenant_id, scheduled_at, created_at, state) "
            "SELECT %s, %s, %s - make_interval(mins => n), %s, 'succeeded' FROM generate_series(1, %s) AS n",
            [past.id, past.tenant_id, NOW, NOW, LEDGER],
        )
    runs = queued_runs(make_job(batch=True), IN_FLIGHT)
    if step == "end":
        JobRun.objects.filter(id__in=[run.id for run in runs]).update(state=RunState.RUNNING, lease_expires_at=db_now())
    ids = [run.id for run in runs[:100]]
    statement, params = (
        (transitions.START_RUNS, {"worker": "w", "task_id": "t", "lease": 60, "queued": "queued"})
        if step == "start"
        else (
            transitions.END_RUNS,
            {
                "states": ["succeeded"] * 100,
                "results": [""] * 100,
                "errors": [""] * 100,
                "delays": [None] * 100,
                "waiteds": [0.0] * 100,
                "running": "running",
                "commit": "off",
            },
        )
    )
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:  # server-side parameters, a custom plan
        cursor.execute("EXPLAIN (COSTS OFF) " + statement, {"ids": ids, "attempts": [1] * 100, **params})
        plan = "\n".join(row[0] for row in cursor.fetchall())

    # By primary key: an index scan, or a bitmap scan of the same index (the planner takes
    # either as autovacuum's statistics of the new ledger come in).
    assert re.search(r"(Index Scan using|Bitmap Index Scan on) scheduler_app_jobrun_pkey\b", plan), plan
    assert "jobrun_queued_idx" not in plan and "jobrun_lease_idx" not in plan and "jobrun_active_idx" not in plan, plan


@pytest.mark.django_db(transaction=True)  # autocommit, as in a worker
def test_only_the_end_commits_asynchronously_and_the_session_stays_durable(make_job, settings):
    """The end's synchronous_commit is set for its own transaction (set_config(..., true));
    the start and everything after the end commit as the session says (on)."""
    from django.db import connection

    settings.CRONFLEET_END_SYNCHRONOUS_COMMIT = "off"
    run = queued_runs(make_job(), 1)[0]
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        before = cursor.fetchone()[0]
        assert execution.execute_run(run.id, 1, worker="w").state == "succeeded"
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == before == "on"


def test_a_batch_run_that_was_taken_away_is_not_overwritten(make_job):
    job = make_job(batch=True)
    first, second = queued_runs(job, 2)
    started = execution.start_runs([(first.id, 1), (second.id, 1)], worker="old")
    JobRun.objects.filter(id=first.id).update(state=RunState.QUEUED, attempt=2)  # lost and requeued meanwhile

    outcomes = execution.write_endings([execution.attempt_target(run) for run in started])

    assert (outcomes[first.id].state, outcomes[second.id].state) == ("stale", "succeeded")
    first.refresh_from_db()
    assert (first.state, first.attempt, first.result) == ("queued", 2, "")


def test_batch_needs_a_short_timeout_and_names_the_field(tenant):
    spec = services.JobSpec(name="long", task_name="scheduler_app.echo", every=60, batch=True, timeout_seconds=300)

    with pytest.raises(services.InvalidInput) as refused:
        services.job_create(tenant, spec)

    assert refused.value.field == "batch" and not Job.objects.exists()
    job = services.job_create(
        tenant, services.JobSpec(name="short", task_name="scheduler_app.echo", every=60, batch=True, timeout_seconds=30)
    )
    assert job.batch


def test_the_api_and_the_cli_take_batch(tenant):
    from django.core.management import call_command

    from tests.integration.api.test_api import client_for, job_body

    made = client_for(tenant).post("/api/v1/jobs/", job_body(batch=True, timeout_seconds=20), format="json")
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "cli",
        "--every",
        "60",
        "--task",
        "scheduler_app.echo",
        "--batch",
        "--timeout",
        "10",
    )

    assert made.status_code == 201, made.json()
    assert made.json()["batch"] is True
    assert Job.objects.get(name="cli").batch
