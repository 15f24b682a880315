"""Job priority at the broker queue with real processes: a worker on Redis and a worker on
RabbitMQ take queued runs by priority (the ledger's start times give the order).
"""

from datetime import timedelta

import pytest

from scheduler_app.models import JobRun, RunState, db_now
from tests.conftest import AMQP_URL, take_broker_messages, wait_for
from tests.integration.dispatch.test_priority import PRIORITIES, seed


def ledger_start_order(jobs: dict[int, int]) -> list[int]:
    runs = JobRun.objects.filter(job_id__in=jobs).order_by("started_at", "id")
    return [jobs[run.job_id] for run in runs]


def start_in_priority_order(tenant, processes, queue_name, **env):
    """Queue one run for each of ten jobs with a beat, with no worker up; then let one worker
    with one process take them. The ledger's start times give the order it took them in."""
    start = db_now() - timedelta(seconds=1)
    jobs = seed(tenant, PRIORITIES, at=start, queue=queue_name, every_seconds=3600, anchor_at=start, cron="")

    beat = processes.beat("beat", "--once", **env)
    assert beat.wait(timeout=60) == 0, processes.log("beat")
    assert JobRun.objects.filter(job_id__in=jobs, state=RunState.QUEUED).count() == 10

    processes.worker(queue_name, concurrency=1, **env)
    wait_for(
        lambda: JobRun.objects.filter(job_id__in=jobs, state=RunState.SUCCEEDED).count() == 10,
        timeout=60,
        what="ten runs to succeed",
    )
    return ledger_start_order(jobs)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_on_redis_takes_queued_runs_by_priority(tenant, processes, queue_name):
    try:
        order = start_in_priority_order(tenant, processes, queue_name)
    finally:
        processes.stop_all()
        take_broker_messages(queue_name)

    assert order == sorted(PRIORITIES, reverse=True)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_on_rabbitmq_takes_queued_runs_by_priority(tenant, processes, rabbitmq_queue):
    try:
        order = start_in_priority_order(tenant, processes, rabbitmq_queue, CELERY_BROKER_URL=AMQP_URL)
    finally:
        processes.stop_all()  # before the fixture deletes the queue

    assert order == sorted(PRIORITIES, reverse=True)
