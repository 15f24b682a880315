"""Backpressure: a beat claims no new fires for a broker queue at its high-water mark.

The fires wait in the database, due, and the next claim ranks them fairly with whatever
fell due meanwhile; so a tenant's spike cannot bury another tenant's fires at the workers
(DESIGN §7: keep the broker shallow so fairness decided in the database holds there).
"""

from datetime import timedelta

import pytest
import redis

from scheduler_app import dispatch
from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from tests.conftest import AMQP_URL, take_broker_messages, utc, wait_for

GRACE = timedelta(seconds=60)
T = utc(2024, 1, 1, 0, 0, 0)


def one_offs(tenant, count, at, **fields) -> list[int]:
    fields.setdefault("task_name", "scheduler_app.echo")
    jobs = Job.objects.bulk_create(
        Job(tenant=tenant, name=f"{tenant.slug}-{i}", run_at=at, next_run_at=at, **fields) for i in range(count)
    )
    return [job.id for job in jobs]


def turn(now, batch):
    return dispatch.run_turn(now, batch_size=batch, grace=GRACE, sweep=False)


@pytest.fixture
def queues(queue_name):
    names = (queue_name, f"{queue_name}-other")
    yield names
    for name in names:
        take_broker_messages(name)


@pytest.mark.django_db(transaction=True)
def test_a_full_queue_is_not_claimed_for_until_workers_drain_it(settings, queues):
    settings.CRONFLEET_QUEUE_HIGH_WATER = 50
    busy, other = queues
    spike = Tenant.objects.create(slug="spike", name="spike")
    one_offs(spike, 200, T, queue=busy)

    claimed = [turn(T, batch=30).claimed for _ in range(3)]

    # 30 and 30 published; then the queue holds 60 >= 50 and nothing more is claimed.
    assert claimed == [30, 30, 0]
    assert JobRun.objects.count() == 60
    assert Job.objects.filter(next_run_at=T).count() == 140  # still due, in the database, not lost
    assert turn(T, batch=30).held_back == [busy]

    # Another queue is not held back by this one's depth.
    calm = Tenant.objects.create(slug="calm", name="calm")
    later = T + timedelta(seconds=1)
    one_offs(calm, 10, later, queue=other)
    result = turn(later, batch=30)
    assert (result.claimed, result.held_back) == (10, [busy])
    assert JobRun.objects.filter(tenant=calm).count() == 10

    # The beat sleeps briefly instead of spinning on the held-back due jobs (it claimed for
    # another queue this turn) ...
    assert dispatch.seconds_until_due(later, cap=5, held_back=[busy]) == dispatch.backpressure.BACKPRESSURE_POLL_SECONDS
    assert dispatch.seconds_until_due(later, cap=5) == 0
    # ... and longer, up to a bound, while turns find nothing else to claim.
    sleeps = []
    for _ in range(4):
        assert turn(later, batch=30).claimed == 0
        sleeps.append(dispatch.seconds_until_due(later, cap=5, held_back=[busy]))
    assert sleeps == [1.0, 2.0, 2.0, 2.0]

    take_broker_messages(busy)  # workers drained it

    assert turn(later, batch=30).claimed == 30
    runs = JobRun.objects.filter(tenant=spike)
    assert runs.count() == runs.values("job_id").distinct().count() == 90  # one run per fire


@pytest.mark.django_db(transaction=True)
def test_backpressure_off_claims_whatever_the_depth(settings, queues):
    settings.CRONFLEET_QUEUE_HIGH_WATER = 0
    busy, _ = queues
    one_offs(Tenant.objects.create(slug="spike", name="spike"), 100, T, queue=busy)

    assert [turn(T, batch=30).claimed for _ in range(4)] == [30, 30, 30, 10]


@pytest.mark.django_db(transaction=True)
def test_when_the_broker_cannot_say_how_deep_a_queue_is_the_beat_claims_as_usual(settings, queues, monkeypatch,
                                                                                 caplog):
    settings.CRONFLEET_QUEUE_HIGH_WATER = 1
    busy, _ = queues
    one_offs(Tenant.objects.create(slug="spike", name="spike"), 40, T, queue=busy)
    assert turn(T, batch=20).claimed == 20  # the queue is now known, and over the mark

    def unreachable(queues):
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(dispatch.backpressure, "queue_depths", unreachable)

    assert turn(T, batch=20).claimed == 20
    assert "backpressure: could not read the broker queues' depths (ConnectionError" in caplog.text


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_beat_on_rabbitmq_holds_back_a_full_queue(tenant, processes, rabbitmq_queue):
    """The depth check against RabbitMQ: a queue it does not know yet, then one at the mark."""
    start = db_now() - timedelta(seconds=1)
    one_offs(tenant, 20, start, queue=rabbitmq_queue)

    processes.beat("beat", "--max-sleep", "1", "--batch-size", "5", CELERY_BROKER_URL=AMQP_URL,
                   CRONFLEET_QUEUE_HIGH_WATER="5", CRONFLEET_LOG_LEVEL="INFO")
    wait_for(lambda: "backpressure: queues holding 5 messages or more" in processes.log("beat"), timeout=30,
             what="the beat to hold the queue back")

    assert JobRun.objects.count() == 5  # the first batch; then the queue held 5
    assert Job.objects.filter(next_run_at=start).count() == 15
    processes.stop_all()
    assert "backpressure: could not read" not in processes.log("beat")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("high_water", [20, 0])
def test_a_spike_does_not_bury_the_next_tenants_fires_at_the_workers(high_water, processes, queue_name):
    """Tenant "spike" has 200 runs of 50 ms due at once; tenant "calm" has 10 due two seconds
    later, on the same queue. One worker with two processes drains about 40 runs a second.

    With backpressure (a high-water mark of 20) calm's fires are claimed as they fall due,
    ahead of spike's remaining due jobs (the fair claim), and wait behind at most ~20
    messages: most of spike's runs start after all of calm's. Without it (0) every spike
    message is in the queue before calm's, and calm's runs start last.
    """
    processes.worker(queue_name, concurrency=2)
    processes.beat("beat", "--max-sleep", "1", "--batch-size", "20", CRONFLEET_QUEUE_HIGH_WATER=str(high_water))
    wait_for(lambda: "runbeat: started" in processes.log("beat"), timeout=30, what="the beat to start")
    start = db_now() + timedelta(seconds=1)
    spike_jobs = one_offs(Tenant.objects.create(slug="spike", name="spike"), 200, start, queue=queue_name,
                          task_name="scheduler_app.sleep", kwargs={"seconds": 0.05})
    calm_jobs = one_offs(Tenant.objects.create(slug="calm", name="calm"), 10, start + timedelta(seconds=2),
                         queue=queue_name)

    wait_for(lambda: JobRun.objects.filter(state=RunState.SUCCEEDED).count() == 210, timeout=120,
             what="all 210 runs to succeed")

    calm_last_start = max(JobRun.objects.filter(job_id__in=calm_jobs).values_list("started_at", flat=True))
    spike_after = JobRun.objects.filter(job_id__in=spike_jobs, started_at__gt=calm_last_start).count()
    calm_lag = max(run.started_at - run.scheduled_at for run in JobRun.objects.filter(job_id__in=calm_jobs))
    print(f"high water {high_water}: calm's worst start lag {calm_lag.total_seconds():.2f} s; "
          f"{spike_after} of spike's 200 runs started after calm's last")
    if high_water:
        assert spike_after >= 50
    else:
        assert spike_after <= 5
