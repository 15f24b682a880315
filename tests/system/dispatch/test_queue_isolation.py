"""One tenant's queue name must never stop the fleet, with real beats and workers: a queue the
broker refuses (a poisoned name on Redis, a reserved one on RabbitMQ) costs only its own
messages, and another tenant's fires start on time.
"""

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from tests.conftest import AMQP_URL, take_broker_messages, wait_for


def poison_beside_healthy(queue: str, poison: str) -> tuple[list[int], Job]:
    """An every-second job of tenant "poison" on queue `poison` (written to the row
    directly, as an old row might be) and ten due one-offs of tenant "healthy" on `queue`."""
    now = db_now()
    poison_tenant = Tenant.objects.create(slug="poison", name="poison")
    poisoned = services.job_create(
        poison_tenant, services.JobSpec(name="poison", task_name="scheduler_app.echo", every=1, priority=9)
    )
    Job.objects.filter(id=poisoned.id).update(queue=poison, next_run_at=now)
    healthy = Tenant.objects.create(slug="healthy", name="healthy")
    jobs = Job.objects.bulk_create(
        Job(
            tenant=healthy,
            name=f"h{i}",
            task_name="scheduler_app.echo",
            run_at=now + timedelta(seconds=2 + i),
            next_run_at=now + timedelta(seconds=2 + i),
            queue=queue,
        )
        for i in range(10)
    )
    return [job.id for job in jobs], poisoned


# The beats' republish sweep, set long: a healthy run the refusal kept from the broker would
# start only this late, far later than a beat turn's delay on a loaded machine.
REPUBLISH_IDLE_SECONDS = 60


def assert_healthy_runs_on_time(healthy: list[int], poisoned: Job, beat_log) -> None:
    wait_for(
        lambda: JobRun.objects.filter(job_id__in=healthy, state=RunState.SUCCEEDED).count() == 10,
        timeout=REPUBLISH_IDLE_SECONDS + 30,
        what="the healthy tenant's ten runs to succeed",
    )
    lags = [(run.started_at - run.scheduled_at).total_seconds() for run in JobRun.objects.filter(job_id__in=healthy)]
    print(f"healthy start lag: max {max(lags):.2f} s")
    # Healthy runs left unpublished by the refusal would go out only with the republish sweep.
    assert max(lags) < REPUBLISH_IDLE_SECONDS / 2, sorted(lags)
    assert JobRun.objects.filter(job=poisoned).count() >= 2  # the poisoned fires are recorded, not lost
    assert JobRun.objects.filter(job=poisoned).exclude(state=RunState.QUEUED).count() == 0
    log = beat_log()
    assert "beat turn failed" not in log
    assert "publish to queue" in log and "refused" in log


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_poisoned_queue_on_redis_does_not_stop_another_tenants_fires(processes, queue_name):
    processes.worker(queue_name, concurrency=2)  # its queue's bindings: the Redis set the poison names
    healthy, poisoned = poison_beside_healthy(queue_name, f"_kombu.binding.{queue_name}")

    processes.beat("beat", "--max-sleep", "1", CRONFLEET_REPUBLISH_IDLE_SECONDS=str(REPUBLISH_IDLE_SECONDS))
    try:
        assert_healthy_runs_on_time(healthy, poisoned, lambda: processes.log("beat"))
    finally:
        processes.stop_all()
        take_broker_messages(queue_name)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_refused_queue_on_rabbitmq_does_not_stop_another_tenants_fires(processes, rabbitmq_queue):
    """RabbitMQ refuses to declare a queue in its reserved amq. prefix (ACCESS_REFUSED) and
    closes the channel that asked: the next queue must get a channel of its own."""
    processes.worker(rabbitmq_queue, concurrency=2, CELERY_BROKER_URL=AMQP_URL)
    healthy, poisoned = poison_beside_healthy(rabbitmq_queue, "amq.cronfleet-poison")

    processes.beat(
        "beat",
        "--max-sleep",
        "1",
        CELERY_BROKER_URL=AMQP_URL,
        CRONFLEET_REPUBLISH_IDLE_SECONDS=str(REPUBLISH_IDLE_SECONDS),
    )
    try:
        assert_healthy_runs_on_time(healthy, poisoned, lambda: processes.log("beat"))
    finally:
        processes.stop_all()
