"""Real Celery worker processes on Redis, with real beats, against the PostgreSQL test database."""

from datetime import datetime

import pytest

from scheduler_app import services
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import AuditEvent, JobRun, RunState
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def spec(**fields) -> services.JobSpec:
    fields.setdefault("task_name", "scheduler_app.echo")
    return services.JobSpec(**fields)


def test_a_worker_executes_scheduled_runs_end_to_end(tenant, processes, queue_name):
    job = services.job_create(tenant, spec(name="echo", every=1, queue=queue_name, kwargs={"n": 7}))
    processes.worker(queue_name)
    processes.beat("beat", "--max-sleep", "1")

    wait_for(
        lambda: JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count() >= 3,
        timeout=60,
        what="three succeeded runs",
    )

    done = list(JobRun.objects.filter(job=job, state=RunState.SUCCEEDED))
    for run in done:
        assert '"kwargs": {"n": 7}' in run.result and run.fire_key in run.result
        assert run.worker.startswith("worker-") and run.celery_task_id == f"cronfleet-run-{run.id}-1"
        assert run.started_at >= run.enqueued_at >= run.scheduled_at


def test_the_same_message_delivered_twice_executes_once(tenant, processes, queue_name):
    job = services.job_create(tenant, spec(name="once", every=3600, queue=queue_name))
    run = services.job_trigger(job, actor="test")  # publishes one message after commit
    publish_runs([RunMessage(run.id, 1, queue_name, 60)])  # and a second, identical one

    processes.worker(queue_name, concurrency=2)

    wait_for(
        lambda: JobRun.objects.filter(id=run.id, duplicate_deliveries=1, state=RunState.SUCCEEDED).exists(),
        timeout=60,
        what="the run to succeed and the duplicate to be counted",
    )
    run.refresh_from_db()
    assert [attempt["outcome"] for attempt in run.attempts] == ["succeeded"]
    assert list(AuditEvent.objects.filter(run_id=run.id).values_list("action", flat=True)) == ["run.duplicate_delivery"]


def test_a_failing_task_retries_with_backoff_and_ends_dead(tenant, processes, queue_name):
    job = services.job_create(
        tenant,
        spec(
            name="flaky",
            task_name="scheduler_app.fail",
            every=3600,
            queue=queue_name,
            max_attempts=3,
            retry_backoff_seconds=1,
        ),
    )
    run = services.job_trigger(job, actor="test")
    processes.worker(queue_name)
    processes.beat("beat", "--max-sleep", "1")

    wait_for(lambda: JobRun.objects.filter(id=run.id, state=RunState.DEAD).exists(), timeout=90, what="a dead run")

    run.refresh_from_db()
    assert run.attempt == 3 and "RuntimeError" in run.error
    assert [(a["attempt"], a["outcome"]) for a in run.attempts] == [(1, "retrying"), (2, "retrying"), (3, "dead")]
    assert all("RuntimeError" in a["error"] and a["worker"] == run.worker for a in run.attempts)
    starts = [datetime.fromisoformat(a["started_at"]) for a in run.attempts]
    ends = [datetime.fromisoformat(a["finished_at"]) for a in run.attempts]
    gaps = [(start - end).total_seconds() for end, start in zip(ends, starts[1:])]
    # Backoff 1 s then 2 s (+/-10%): no retry starts before its backoff is over (the beat
    # picks one up a second or so late, more on a loaded machine).
    assert gaps[0] >= 0.9 and gaps[1] >= 1.8, gaps
    assert not AuditEvent.objects.filter(run_id=run.id).exists()  # normal transitions live on the run
