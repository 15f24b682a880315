"""Hand recorded runs to the Celery broker, in batches, over one connection.

Called only after the transaction that recorded the runs has committed: a worker must
find the row its message names. Nothing here touches the database but shadow.py's cache of
tenant slugs (a query when a tenant is new to the process).

Messages go through the broker's default exchange ("") with the queue name as routing
key. Celery's own `apply_async` routes through the `celery` direct exchange, which on
Redis costs a round trip per message to read the exchange's bindings; the default
exchange needs no lookup on Redis and means the same thing on RabbitMQ. On Redis the
messages are written as kombu's transport writes them, from templates (rediswire.py), in
pipelines of a thousand pushes; elsewhere kombu's `Producer.batch()` publishes them.

On RabbitMQ (CRONFLEET_RABBITMQ_CONFIRM_PUBLISH, the default) a queue's messages go out on a
channel in confirm mode and the call waits for the node's confirms once, after the last of
them (confirms.py): a refused or unconfirmed message raises, and its runs stay queued.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from celery import current_app as app
from kombu import Producer

from scheduler_app.conf import app_settings
from scheduler_app.dispatch import shadow
from scheduler_app.dispatch.confirms import CONFIRM_TIMEOUT_SECONDS, Confirms
from scheduler_app.dispatch.rediswire import RedisWire
from scheduler_app.models import PRIORITY_DEFAULT, PRIORITY_MAX, celery_task_id
from scheduler_app.queues import EXECUTE_HTTP_RUNS, EXECUTE_RUN, EXECUTE_RUNS, broker_errors, queue_name, task_queue

logger = logging.getLogger(__name__)

# Seconds between the soft time limit (the task is told to stop) and the hard one (killed).
HARD_LIMIT_MARGIN = 30
PUBLISH_BATCH = 1000


@dataclass(frozen=True)
class RunMessage:
    run_id: int
    attempt: int
    queue: str
    timeout_seconds: int
    priority: int = PRIORITY_DEFAULT
    batch: bool = False  # the job's runs may share a message with others (Job.batch)
    target_kind: str = "task"
    tenant_id: int = 0  # with the job's name, what Celery shows the message as (shadow.py)
    name: str = ""

    # The job columns a message is made from (after the run's id and attempt).
    JOB_FIELDS = ("queue", "timeout_seconds", "priority", "batch", "target_kind", "tenant_id", "name")

    @property
    def batched(self) -> bool:
        return self.batch or self.in_flight or queue_name(self.queue) in app_settings.BATCH_QUEUES

    @property
    def in_flight(self) -> bool:
        """An HTTP run, sent in a group that a worker puts in flight at once (worker/flight.py)."""
        return self.target_kind == "http" and app_settings.HTTP_IN_FLIGHT > 0

    @classmethod
    def of(cls, run_id: int, attempt: int, job) -> RunMessage:
        """The message for a run of `job` (a Job, or a mapping with JOB_FIELDS)."""
        get = job.__getitem__ if isinstance(job, Mapping) else job.__getattribute__
        return cls(run_id, attempt, *(get(name) for name in cls.JOB_FIELDS))


def broker_priority(priority: int, driver_type: str) -> int:
    """The message priority property for a job's priority (0-9, higher first).

    RabbitMQ serves the higher number first, like Job.priority. kombu's Redis transport
    keeps one list per priority and serves the lowest number first, so it gets 9 - priority.
    The filesystem transport has no priorities (first in, first out).
    """
    return PRIORITY_MAX - priority if driver_type == "redis" else priority


def publish_runs(messages: Iterable[RunMessage]) -> int:
    """Publish one execute_run message per run; return how many were sent.

    Queue by queue: a queue the broker refuses (a name that collides with one of its own
    keys, a policy, a full disk on one node) costs only that queue's messages, not the turn
    of every other tenant. Those runs stay `queued` in the ledger and the recovery sweep
    publishes them again; the worker's compare-and-set makes a repeat harmless. A broker
    that cannot be reached at all still raises (nothing can be sent: the beat retries).
    """
    by_queue: dict[str, list[RunMessage]] = {}
    for message in messages:
        by_queue.setdefault(queue_name(message.queue), []).append(message)
    if not by_queue:  # a turn calls this five times, mostly with nothing to send
        return 0
    sent = 0
    templates = MessageTemplates()
    shadow.learn_tenants({message.tenant_id for batch in by_queue.values() for message in batch})
    refused = broker_errors()
    for name, batch in by_queue.items():
        try:
            sent += _publish_queue(name, batch, templates)
        except refused as exc:
            if _unreachable(exc):
                raise
            logger.error(
                "publish to queue %r refused (%s: %s); its %s runs stay queued for the republish sweep",
                name,
                type(exc).__name__,
                exc,
                len(batch),
            )
    return sent


def _publish_queue(name: str, messages: list[RunMessage], templates: MessageTemplates) -> int:
    # Higher priority first: a transport without priorities (filesystem) still hands this
    # batch out in that order. sort() is stable: equal priorities keep their order.
    messages.sort(key=lambda message: -message.priority)
    alone, batches = batched(messages, app_settings.RUN_BATCH_SIZE)
    with app.producer_or_acquire() as producer:
        driver_type = producer.connection.transport.driver_type
        bodies = (
            (body, headers, properties, broker_priority(priority, driver_type))
            for body, headers, properties, priority in _bodies(alone, batches, templates)
        )
        wire = RedisWire(producer.channel) if driver_type == "redis" else None
        if wire is not None and wire.handles(name):
            producer.maybe_declare(task_queue(name))
            wire.push(name, bodies, batch=PUBLISH_BATCH)
        else:
            _publish_kombu(
                producer, name, bodies, confirm=driver_type == "amqp" and app_settings.RABBITMQ_CONFIRM_PUBLISH
            )
    return len(messages)


def _publish_kombu(producer: Producer, name: str, bodies: Iterable[tuple], *, confirm: bool) -> None:
    """kombu's publish of each (body, headers, properties, broker priority), in its batches;
    with `confirm`, on a channel in confirm mode, waiting for the node's confirms once."""
    confirms = None
    if confirm:
        confirms = Confirms.of(producer.connection)
        producer = Producer(confirms.channel)
    try:
        # Declared once per call (kombu caches it per connection), so a queue no worker has
        # consumed yet still keeps its messages; with the arguments a worker declares it with
        # (RabbitMQ compares them).
        producer.maybe_declare(task_queue(name))
        with producer.batch(max_size=PUBLISH_BATCH):
            for body, headers, properties, priority in bodies:
                producer.publish(
                    body,
                    exchange="",
                    routing_key=name,
                    headers=headers,
                    serializer="json",
                    delivery_mode=2,
                    priority=priority,
                    **properties,
                )
                if confirms is not None:
                    confirms.sent()
        if confirms is not None:
            confirms.wait(CONFIRM_TIMEOUT_SECONDS)
    except BaseException:
        if confirms is not None:
            confirms.discard()  # the next publish starts on a fresh channel
        raise


def _bodies(alone: list[RunMessage], batches: list[list[RunMessage]], templates: MessageTemplates):
    """(body, headers, properties, priority) of each message to publish: the runs sent alone,
    then the batches."""
    for message in alone:
        yield *templates.build(message), message.priority
    for batch in batches:
        yield *templates.build_batch(batch), batch[0].priority


def batched(messages: list[RunMessage], size: int) -> tuple[list[RunMessage], list[list[RunMessage]]]:
    """The messages to send alone, and the batches (up to `size` runs of one target kind,
    in the order given: a batch starts with its highest priority) to send as one message."""
    alone: list[RunMessage] = []
    by_kind: dict[str, list[RunMessage]] = {}
    for message in messages:
        if message.batched:
            by_kind.setdefault(message.target_kind, []).append(message)
        else:
            alone.append(message)
    batches = [runs[start : start + size] for runs in by_kind.values() for start in range(0, len(runs), size)]
    return alone, batches


def _unreachable(exc: BaseException) -> bool:
    """True when `exc` says the broker is out of reach (not that it refused one queue)."""
    with app.connection_for_write() as conn:
        return isinstance(exc, (OSError, *conn.connection_errors)) and not isinstance(exc, conn.channel_errors)


class MessageTemplates:
    """Celery protocol-2 messages for execute_run, built once per timeout and then copied.

    Celery's as_task_v2 costs ~40 µs a message (a dozen settings lookups and reprs); at a
    spike of 100,000 fires that was half of a beat's CPU. Messages differ only in the
    run id, attempt and task id, so each is the template with those three filled in.
    """

    def __init__(self) -> None:
        self._by_timeout: dict[tuple[str, int], tuple[dict, dict, tuple]] = {}

    def build(self, message: RunMessage) -> tuple[tuple, dict, dict]:
        task_id = celery_task_id(message.run_id, message.attempt)
        return self._fill(
            EXECUTE_RUN,
            message.timeout_seconds,
            task_id,
            [message.run_id, message.attempt],
            shadow.shadow_name(message.tenant_id, message.name) or None,
        )

    def build_batch(self, batch: list[RunMessage]) -> tuple[tuple, dict, dict]:
        """One execute_runs message for `batch`. Its time limit is the sum of its runs'
        timeouts, within the longest a job may ask for (which stays below the broker's
        visibility timeout); its id names its first run and its size."""
        timeout = min(sum(m.timeout_seconds for m in batch), app_settings.MAX_JOB_TIMEOUT_SECONDS)
        task_id = f"{celery_task_id(batch[0].run_id, batch[0].attempt)}-batch-{len(batch)}"
        first = shadow.shadow_name(batch[0].tenant_id, batch[0].name)
        name = f"{first} and {len(batch) - 1} more" if first and len(batch) > 1 else first
        task = EXECUTE_HTTP_RUNS if batch[0].in_flight else EXECUTE_RUNS  # batched(): one kind a batch
        return self._fill(task, timeout, task_id, [[[m.run_id, m.attempt] for m in batch]], name or None)

    def _fill(
        self, task: str, timeout: int, task_id: str, args: list, shadow_name: str | None
    ) -> tuple[tuple, dict, dict]:
        headers, properties, rest = self._template(task, timeout)
        return (
            (args, *rest),
            {**headers, "id": task_id, "root_id": task_id, "argsrepr": repr(args)[:1000], "shadow": shadow_name},
            {**properties, "correlation_id": task_id},
        )

    def _template(self, task: str, timeout: int) -> tuple[dict, dict, tuple]:
        if (task, timeout) not in self._by_timeout:
            headers, properties, body, _ = app.amqp.as_task_v2(
                "template",
                task,
                args=[0, 0],
                soft_time_limit=timeout,
                time_limit=timeout + HARD_LIMIT_MARGIN,
                ignore_result=True,
            )
            self._by_timeout[task, timeout] = (headers, properties, tuple(body[1:]))  # body: (args, kwargs, embed)
        return self._by_timeout[task, timeout]
