"""The fences, each tested where only the fence can refuse: an attempt's end written while
the next attempt of the same run is running (the state is `running` for both, so only the
attempt in the end statement's WHERE tells them apart), and one run delivered to two
connections released at the same instant (only the compare-and-set start lets one win)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections

from scheduler_app.dispatch import recovery
from scheduler_app.models import AuditEvent, JobRun, RunState, db_now
from scheduler_app.worker import execution, transitions
from tests.conftest import utc

RACES = 40  # runs delivered twice at once


def row(run: JobRun) -> tuple:
    run.refresh_from_db()
    return run.state, run.attempt, run.worker, run.result, run.error, run.finished_at, run.attempts


def taken_over(run: JobRun) -> tuple:
    """What the beat does to a run whose worker stopped renewing its lease: marked lost
    (retrying), requeued as attempt 2, and started by another worker."""
    past_the_lease = db_now() + timedelta(days=1)
    assert recovery.mark_lost_runs(past_the_lease, limit=100) >= 1
    assert [m.run_id for m in recovery.requeue_due_retries(past_the_lease, limit=100)] == [run.id]
    assert transitions.start_run(run.id, 2, worker="new") is not None
    run.refresh_from_db()
    assert (run.state, run.attempt, run.worker) == (RunState.RUNNING, 2, "new")
    assert [a["outcome"] for a in run.attempts] == ["lost"]
    return row(run)


def refused_and_audited(run: JobRun, before: tuple) -> None:
    assert row(run) == before  # attempt 1's late end changed nothing, appended nothing
    assert AuditEvent.objects.filter(run_id=run.id, action="run.stale_write_rejected").count() == 1


def test_the_end_of_attempt_1_is_refused_while_attempt_2_is_running(make_job, make_run):
    run = make_run(make_job(max_attempts=3))
    started = transitions.start_run(run.id, 1, worker="old")
    before = taken_over(run)

    assert execution.finish_run(started, "late").state == "stale"

    refused_and_audited(run, before)


def test_in_a_batch_only_the_taken_over_run_refuses_attempt_1s_end(make_job, make_run):
    job = make_job(batch=True, max_attempts=3)
    kept, lost = (make_run(job, scheduled_at=utc(2024, 1, 1, 0, minute)) for minute in (0, 1))
    started = transitions.start_runs([(kept.id, 1), (lost.id, 1)], worker="old")
    JobRun.objects.filter(id=kept.id).update(lease_expires_at=db_now() + timedelta(days=2))  # still renewed
    before = taken_over(lost)

    outcomes = execution.write_endings([execution.attempt_target(run) for run in started])

    assert (outcomes[kept.id].state, outcomes[lost.id].state) == ("succeeded", "stale")
    kept.refresh_from_db()
    assert (kept.state, kept.attempt) == (RunState.SUCCEEDED, 1)
    refused_and_audited(lost, before)


@pytest.mark.django_db(transaction=True)  # each thread's own connection sees the committed runs
def test_one_run_delivered_to_two_connections_at_once_starts_once(make_job, make_run):
    job = make_job(task_name="scheduler_app.echo")
    runs = [make_run(job, scheduled_at=utc(2024, 1, 1) + timedelta(minutes=i)) for i in range(RACES)]
    barrier = threading.Barrier(2, timeout=30)
    outcomes: dict[str, list[str]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def deliver(worker: str) -> None:
        try:
            for run in runs:
                barrier.wait()  # both connections send this run's start at the same instant
                outcomes[worker].append(execution.execute_run(run.id, 1, worker=worker).state)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=deliver, args=(worker,)) for worker in outcomes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)

    for i, run in enumerate(runs):
        pair = sorted([outcomes["a"][i], outcomes["b"][i]])
        assert pair == ["duplicate", "succeeded"], (run.id, pair)
        run.refresh_from_db()
        assert (run.state, run.duplicate_deliveries, len(run.attempts)) == (RunState.SUCCEEDED, 1, 1)
    assert (
        AuditEvent.objects.filter(run_id__in=[run.id for run in runs], action="run.duplicate_delivery").count() == RACES
    )
    assert connection.vendor == "postgresql"
