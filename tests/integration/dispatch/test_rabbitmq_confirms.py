"""Publisher confirms on RabbitMQ (CRONFLEET_RABBITMQ_CONFIRM_PUBLISH, issue 28), against the
machine's RabbitMQ (CRONFLEET_TEST_AMQP_URL) in a queue of the test's own, deleted afterwards.

The queue holds one message and refuses the next (x-max-length 1, x-overflow reject-publish:
RabbitMQ answers basic.nack). With confirms, the beat's publish learns it: the queue's publish
raises, publish_runs logs it and counts nothing sent, and the run stays queued for the
republish sweep. Without them the publish returns as if the message were sent and RabbitMQ
drops it.
"""

import logging

import pytest
from celery import current_app as app
from django.test import override_settings
from kombu import Connection, Exchange, Queue

from scheduler_app.dispatch import publish
from scheduler_app.dispatch.confirms import NotConfirmed
from scheduler_app.dispatch.publish import MessageTemplates, RunMessage, publish_runs
from scheduler_app.models import JobRun, RunState, celery_task_id
from tests.conftest import AMQP_URL, reset_pools, wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def full_queue(rabbitmq_queue, monkeypatch):
    """The test's queue as the beat declares it, with room for one message: a second one is
    refused (a deployment's max-length policy, say)."""

    def declaration(name: str) -> Queue:
        return Queue(
            name,
            Exchange(name),
            routing_key=name,
            durable=True,
            queue_arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
        )

    monkeypatch.setattr(publish, "task_queue", declaration)
    # Celery reads the broker from the environment before its settings.
    monkeypatch.setenv("CELERY_BROKER_URL", AMQP_URL)
    reset_pools()
    with override_settings(CELERY_BROKER_URL=AMQP_URL):
        yield rabbitmq_queue
    monkeypatch.undo()
    reset_pools()


def messages_in(queue: str) -> int:
    with Connection(AMQP_URL) as conn:
        return conn.default_channel.queue_declare(queue=queue, passive=True).message_count


def wait_for_messages(queue: str, count: int) -> None:
    """Wait until the queue holds `count` messages. A passive declare's count is RabbitMQ's
    statistics, which may lag the queue by a moment, so it is read until it agrees."""
    wait_for(lambda: messages_in(queue) == count, timeout=10, what=f"{count} message(s) in {queue}")


@pytest.fixture
def queued_run(make_run, make_job, full_queue):
    """A run recorded queued, for a job of the test's queue, and its message."""

    def make() -> tuple[JobRun, RunMessage]:
        run = make_run(job=make_job(queue=full_queue))
        return run, RunMessage.of(run.id, run.attempt, run.job)

    return make


def publish_errors(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == publish.__name__]


@override_settings(CRONFLEET_RABBITMQ_CONFIRM_PUBLISH=True)
def test_with_confirms_a_refused_publish_raises_and_its_run_stays_queued(full_queue, queued_run, caplog):
    _, first = queued_run()
    assert publish_runs([first]) == 1
    wait_for_messages(full_queue, 1)  # confirmed: the queue is full now

    run, refused = queued_run()
    with pytest.raises(NotConfirmed, match=r"refused 1 message\(s\) \(basic.nack\)"):
        publish._publish_queue(full_queue, [refused], MessageTemplates())
    with caplog.at_level(logging.ERROR, logger=publish.__name__):
        assert publish_runs([refused]) == 0  # the beat's turn goes on with its other queues

    assert publish_errors(caplog) == [
        f"publish to queue {full_queue!r} refused (NotConfirmed: the broker refused 1 message(s) (basic.nack)); "
        "its 1 runs stay queued for the republish sweep"
    ]
    run.refresh_from_db()
    assert run.state == RunState.QUEUED and run.started_at is None  # for the republish sweep
    wait_for_messages(full_queue, 1)
    # The channel a refusal closed is not reused: the next publish gets confirmed on a new one.
    with Connection(AMQP_URL) as conn:
        conn.default_channel.queue_purge(full_queue)
    wait_for_messages(full_queue, 0)
    assert publish_runs([refused]) == 1
    wait_for_messages(full_queue, 1)


@override_settings(CRONFLEET_RABBITMQ_CONFIRM_PUBLISH=False)
def test_without_confirms_the_refused_message_is_dropped_unseen(full_queue, queued_run, caplog):
    _, first = queued_run()
    _, dropped = queued_run()
    with caplog.at_level(logging.ERROR, logger=publish.__name__):
        assert publish_runs([first]) == 1
        assert publish_runs([dropped]) == 1  # counted as sent

    assert not publish_errors(caplog)
    # basic.get on the channel the two went out on reaches the queue after both publishes (a
    # channel hands its methods to a queue in order; a passive declare's count may lag): the
    # first is there, the second is gone.
    with app.producer_or_acquire() as producer:  # the pool's producer the publishes used
        queue = Queue(full_queue, channel=producer.channel, no_declare=True)
        taken, after = queue.get(no_ack=True), queue.get(no_ack=True)
    assert taken is not None and taken.headers["id"] == celery_task_id(first.run_id, first.attempt)
    assert after is None
