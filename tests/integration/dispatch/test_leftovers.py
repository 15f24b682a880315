"""Messages of deleted jobs and skipped runs do not stay in the broker (issue 40 item 6,
dispatch/leftovers.py): a queue no live worker consumes is purged once no queued or running
run of the ledger is on it, and never while one is, or while a worker consumes it.

Against the real PostgreSQL and Redis; the consumers are the workers' node rows, as a real
worker writes them (observability/nodes.py)."""

from datetime import timedelta

import pytest
from django.test import override_settings

from scheduler_app import dispatch, services
from scheduler_app.dispatch.leftovers import purge_leftovers
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import JobRun, NodeKind, RunState, db_now
from scheduler_app.observability.nodes import Registration
from scheduler_app.queues import queue_depth
from tests.conftest import AMQP_URL, reset_pools, take_broker_messages, wait_for


@pytest.fixture
def broker_queue(queue_name):
    yield queue_name
    take_broker_messages(queue_name)


def published(make_run, job, count: int, *, ago: float = 0) -> list[JobRun]:
    at = db_now() - timedelta(seconds=ago)
    runs = [
        make_run(job, scheduled_at=at - timedelta(minutes=i), enqueued_at=at, dispatched_at=at) for i in range(count)
    ]
    publish_runs([RunMessage(run.id, 1, job.queue, 60) for run in runs])
    return runs


def test_deleting_the_last_job_of_a_queue_nobody_consumes_purges_its_messages(
    make_job, make_run, broker_queue, django_capture_on_commit_callbacks
):
    job = make_job(queue=broker_queue, next_run_at=None)
    published(make_run, job, 3)
    assert queue_depth(broker_queue) == 3

    with django_capture_on_commit_callbacks(execute=True):
        services.job_delete(job, actor="test")

    assert queue_depth(broker_queue) == 0


def test_a_queue_with_another_jobs_run_waiting_keeps_every_message(
    make_job, make_run, broker_queue, django_capture_on_commit_callbacks
):
    deleted, kept = make_job(queue=broker_queue, next_run_at=None), make_job(queue=broker_queue, next_run_at=None)
    published(make_run, deleted, 2)
    published(make_run, kept, 1)

    with django_capture_on_commit_callbacks(execute=True):
        services.job_delete(deleted, actor="test")

    assert queue_depth(broker_queue) == 3  # the worker that comes drops the deleted job's two


def test_a_queue_a_live_worker_consumes_is_left_to_it(
    make_job, make_run, broker_queue, django_capture_on_commit_callbacks
):
    job = make_job(queue=broker_queue, next_run_at=None)
    published(make_run, job, 2)
    Registration(NodeKind.WORKER, "w@h", stale_after=15, queues=[broker_queue]).register()

    with django_capture_on_commit_callbacks(execute=True):
        services.job_delete(job, actor="test")

    assert queue_depth(broker_queue) == 2


def test_a_bulk_delete_purges_the_queues_it_emptied(
    tenant, make_job, make_run, broker_queue, django_capture_on_commit_callbacks
):
    other = f"{broker_queue}-b"
    try:
        for queue in (broker_queue, other):
            published(make_run, make_job(queue=queue, next_run_at=None, tags=["old"]), 2)

        with django_capture_on_commit_callbacks(execute=True):
            assert services.jobs_bulk(tenant, tag="old", action="delete", actor="test").count == 2

        assert (queue_depth(broker_queue), queue_depth(other)) == (0, 0)
    finally:
        take_broker_messages(other)


def test_the_sweep_purges_a_queue_once_its_last_runs_are_skipped_as_no_consumer(
    make_job, make_run, broker_queue, settings
):
    settings.CRONFLEET_UNCONSUMED_EXPIRE_SECONDS = 60
    job = make_job(queue=broker_queue, next_run_at=None)
    old = published(make_run, job, 3, ago=400)
    young = published(make_run, job, 1, ago=30)

    dispatch.recovery.republish_stale_runs(db_now(), limit=10)
    assert set(JobRun.objects.filter(id__in=[run.id for run in old]).values_list("state", flat=True)) == {
        RunState.SKIPPED
    }
    assert queue_depth(broker_queue) == 4  # the young run still waits for a worker

    long_ago = db_now() - timedelta(seconds=400)
    JobRun.objects.filter(id=young[0].id).update(enqueued_at=long_ago, dispatched_at=long_ago)
    dispatch.recovery.republish_stale_runs(db_now(), limit=10)

    assert JobRun.objects.get(id=young[0].id).state == RunState.SKIPPED
    assert queue_depth(broker_queue) == 0


@pytest.fixture
def on_rabbitmq(rabbitmq_queue, monkeypatch):
    """This process's Celery app on the machine's RabbitMQ, with the test's own queue."""
    monkeypatch.setenv("CELERY_BROKER_URL", AMQP_URL)  # Celery reads it before its settings
    reset_pools()
    with override_settings(CELERY_BROKER_URL=AMQP_URL):
        yield rabbitmq_queue
    monkeypatch.undo()
    reset_pools()


def test_on_rabbitmq_a_deleted_jobs_messages_are_purged_and_an_unknown_queue_is_nothing(
    make_job, make_run, on_rabbitmq, django_capture_on_commit_callbacks
):
    job = make_job(queue=on_rabbitmq, next_run_at=None)
    published(make_run, job, 2)
    wait_for(lambda: queue_depth(on_rabbitmq) == 2, timeout=10, what="RabbitMQ's count of the two messages")

    with django_capture_on_commit_callbacks(execute=True):
        services.job_delete(job, actor="test")

    # RabbitMQ's count may lag the queue by a moment: read until it agrees.
    wait_for(lambda: queue_depth(on_rabbitmq) == 0, timeout=10, what="the purged queue")
    never = f"{on_rabbitmq}-never-declared"
    assert purge_leftovers([never], db_now()) == {never: 0}
