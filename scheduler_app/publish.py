"""Hand recorded runs to the Celery broker, in batches, over one connection.

Called only after the transaction that recorded the runs has committed: a worker must
find the row its message names. Nothing here touches the database.

Messages go through the broker's default exchange ("") with the queue name as routing
key. Celery's own `apply_async` routes through the `celery` direct exchange, which on
Redis costs a round trip per message to read the exchange's bindings; the default
exchange needs no lookup on Redis and means the same thing on RabbitMQ. With kombu's
`Producer.batch()` the Redis transport pipelines the pushes, so a batch of a thousand
messages is a handful of round trips.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from kombu import Exchange, Queue

from project.celery import app
from scheduler_app.models import celery_task_id

logger = logging.getLogger(__name__)

EXECUTE_RUN = "scheduler_app.execute_run"
# Seconds between the soft time limit (the task is told to stop) and the hard one (killed).
HARD_LIMIT_MARGIN = 30
PUBLISH_BATCH = 1000


@dataclass(frozen=True)
class RunMessage:
    run_id: int
    attempt: int
    queue: str
    timeout_seconds: int


def queue_name(queue: str) -> str:
    return queue or settings.CELERY_TASK_DEFAULT_QUEUE


def publish_runs(messages: Iterable[RunMessage]) -> int:
    """Publish one execute_run message per run; return how many were sent.

    A failure part-way raises: the runs stay `queued` in the ledger and the recovery
    sweep publishes them again; the worker's compare-and-set makes a repeat harmless.
    """
    messages = list(messages)
    if not messages:
        return 0
    declared: set[str] = set()
    templates = MessageTemplates()
    with app.producer_or_acquire() as producer:
        with producer.batch(max_size=PUBLISH_BATCH):
            for message in messages:
                name = queue_name(message.queue)
                if name not in declared:
                    # Declared once per call (kombu caches it per connection), so a queue
                    # no worker has consumed yet still keeps its messages.
                    producer.maybe_declare(Queue(name, Exchange(name), routing_key=name))
                    declared.add(name)
                body, headers, properties = templates.build(message)
                producer.publish(body, exchange="", routing_key=name, headers=headers, serializer="json",
                                 delivery_mode=2, **properties)
    return len(messages)


def queue_depth(queue: str) -> int:
    """Messages waiting in the broker queue `queue` (0 when the broker does not know it)."""
    with app.connection_for_write() as conn:
        try:
            return conn.default_channel.queue_declare(queue=queue_name(queue), passive=True).message_count
        except conn.channel_errors:  # no such queue: nothing is waiting in it
            return 0


class MessageTemplates:
    """Celery protocol-2 messages for execute_run, built once per timeout and then copied.

    Celery's as_task_v2 costs ~40 µs a message (a dozen settings lookups and reprs); at a
    spike of 100,000 fires that was half of a beat's CPU. Messages differ only in the
    run id, attempt and task id, so each is the template with those three filled in.
    """

    def __init__(self) -> None:
        self._by_timeout: dict[int, tuple[dict, dict, tuple]] = {}

    def build(self, message: RunMessage) -> tuple[tuple, dict, dict]:
        headers, properties, rest = self._template(message.timeout_seconds)
        task_id = celery_task_id(message.run_id, message.attempt)
        args = [message.run_id, message.attempt]
        return (
            (args, *rest),
            {**headers, "id": task_id, "root_id": task_id, "argsrepr": repr(args)},
            {**properties, "correlation_id": task_id},
        )

    def _template(self, timeout: int) -> tuple[dict, dict, tuple]:
        if timeout not in self._by_timeout:
            headers, properties, body, _ = app.amqp.as_task_v2(
                "template", EXECUTE_RUN, args=[0, 0], soft_time_limit=timeout,
                time_limit=timeout + HARD_LIMIT_MARGIN, ignore_result=True,
            )
            self._by_timeout[timeout] = (headers, properties, tuple(body[1:]))  # body: (args, kwargs, embed)
        return self._by_timeout[timeout]
