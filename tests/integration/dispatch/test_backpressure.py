"""Backpressure: a beat claims no new fires for a broker queue at its high-water mark.

The fires wait in the database, due, and the next claim ranks them fairly with whatever
fell due meanwhile; so a tenant's spike cannot bury another tenant's fires at the workers
(DESIGN §7: keep the broker shallow so fairness decided in the database holds there).
Here the beat's turns against the real PostgreSQL and Redis; real beats and workers (on
Redis and RabbitMQ): the system tier's test_backpressure.
"""

from datetime import timedelta

import pytest
import redis

from scheduler_app import dispatch
from scheduler_app.models import Job, JobRun, Tenant
from tests.conftest import take_broker_messages, utc

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
def test_when_the_broker_cannot_say_how_deep_a_queue_is_the_beat_claims_as_usual(settings, queues, monkeypatch, caplog):
    settings.CRONFLEET_QUEUE_HIGH_WATER = 1
    busy, _ = queues
    one_offs(Tenant.objects.create(slug="spike", name="spike"), 40, T, queue=busy)
    assert turn(T, batch=20).claimed == 20  # the queue is now known, and over the mark

    def unreachable(queues):
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(dispatch.backpressure, "queue_depths", unreachable)

    assert turn(T, batch=20).claimed == 20
    assert "backpressure: could not read the broker queues' depths (ConnectionError" in caplog.text
