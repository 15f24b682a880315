"""Native delayed delivery set up through the node the consumer holds (worker/delayed.py),
on the machine's RabbitMQ, with a node that refuses connections listed first: the failover
list of a cluster whose first node is down."""

import socket
from types import SimpleNamespace

import pytest
from celery import Celery
from kombu import Connection, Exchange, Queue
from kombu.transport.native_delayed_delivery import calculate_routing_key

from scheduler_app.worker.delayed import DelayedDelivery
from tests.conftest import AMQP_URL

pytestmark = pytest.mark.usefixtures("rabbitmq_queue")


class Recording(DelayedDelivery):
    """The step, noting each broker URL it sets up delayed delivery through."""

    def __init__(self, parent) -> None:
        super().__init__(parent)
        self.tried: list[str] = []

    def _setup_delayed_delivery(self, c, broker_url: str) -> None:
        self.tried.append(broker_url)
        super()._setup_delayed_delivery(c, broker_url)


def refused_url() -> str:
    """An AMQP URL of a port nothing listens on (taken, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"amqp://guest:guest@127.0.0.1:{port}//"


def test_the_step_asks_only_the_node_the_consumer_is_connected_to(rabbitmq_queue, monkeypatch):
    failover = f"{refused_url()};{AMQP_URL}"
    monkeypatch.setenv("CELERY_BROKER_URL", failover)  # Celery takes it over its app's setting
    app = Celery("delayed-test", set_as_current=False)
    assert app.conf.broker_url == failover
    exchange = Exchange(rabbitmq_queue, type="topic")  # a direct exchange is left unbound (Celery's rule)
    queue = Queue(rabbitmq_queue, exchange, routing_key="#", queue_arguments={"x-queue-type": "quorum"})
    app.conf.task_queues = [queue]
    with Connection(failover, connect_timeout=5) as held:
        queue(held.default_channel).declare()  # as the consumer's Tasks step does, before this step
        held.ensure_connection(max_retries=2)  # kombu fails over from the refusing node
        consumer = SimpleNamespace(app=app, connection=held)
        step = Recording(consumer)
        assert step.include_if(consumer)  # a quorum queue: Celery would include its own step too
        step.start(consumer)
        live = held.as_uri(include_password=True)
    try:
        assert step.tried == [live]  # once, through the node that answered; the refusing one never
        # The queue's exchange is bound to the delayed delivery exchanges: a message sent to
        # them with a countdown of 1 s (as Celery sends a task with a countdown) reaches the queue.
        with Connection(AMQP_URL, connect_timeout=5) as conn:
            producer = conn.Producer()
            producer.publish(
                {"hello": "delayed"},
                exchange="celery_delayed_27",  # where Celery sends a task with a countdown
                routing_key=calculate_routing_key(1, rabbitmq_queue),
                declare=[],
            )
            message = conn.SimpleQueue(queue).get(timeout=10)
            assert message.payload == {"hello": "delayed"}
            message.ack()
    finally:
        with Connection(AMQP_URL, connect_timeout=5) as conn:
            conn.default_channel.exchange_delete(rabbitmq_queue)
