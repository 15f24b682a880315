"""The broker's queues: which names a job may use (no database, no broker), the name a
message goes to, how many messages wait in each, and the task names a run's message carries.

A job's queue is a name its tenant types, and the beat publishes to it with the broker's
own key space: on Redis a queue is a list key beside kombu's bookkeeping keys
(`_kombu.binding.*`, `unacked`, `unacked_index`, ...), on RabbitMQ `amq.*` is reserved by
the server. One tenant naming such a key made every publish of every beat turn fail
(WRONGTYPE), so names follow a strict pattern and never name a broker- or Celery-internal
queue. A deployment can also list the queues its workers consume (CRONFLEET_QUEUES).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from celery import current_app as app
from kombu import Exchange, Queue
from kombu.exceptions import KombuError

from scheduler_app.conf import app_settings, broker_transport_options

# The tasks a run's message names (scheduler_app/tasks.py): the beat publishes them, the worker
# reports on them. Queued messages carry these names: never rename them.
EXECUTE_RUN = "scheduler_app.execute_run"
EXECUTE_RUNS = "scheduler_app.execute_runs"  # a batch: [[run id, attempt], ...]
EXECUTE_HTTP_RUNS = "scheduler_app.execute_http_runs"  # HTTP runs, put in flight together: the same body

PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
# Names the brokers or Celery keep for themselves: RabbitMQ's reserved prefix, Celery's
# event and remote-control queues, and the keys of kombu's Redis transport.
RESERVED_PREFIXES = ("amq.", "celeryev", "celery.pidbox", "unacked")
RESERVED_SUFFIXES = (".pidbox", ".celery.pidbox")
RESERVED_PARTS = ("reply.celery",)


class InvalidQueue(ValueError):
    pass


def check_queue(name: str) -> str:
    """`name` if a job may publish to it (blank: the default queue); else InvalidQueue."""
    if name == "":
        return name
    if not isinstance(name, str) or not PATTERN.fullmatch(name):
        raise InvalidQueue("must be 1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
    if (
        name.startswith(RESERVED_PREFIXES)
        or name.endswith(RESERVED_SUFFIXES)
        or any(part in name for part in RESERVED_PARTS)
    ):
        raise InvalidQueue(f"{name!r} is a name the broker or Celery keeps for itself")
    allowed = app_settings.QUEUES
    if allowed and name not in allowed and name != app_settings.QUEUE:
        raise InvalidQueue(f"{name!r} is not one of this deployment's queues ({', '.join(allowed)}; CRONFLEET_QUEUES)")
    return name


def queue_name(queue: str) -> str:
    return queue or app_settings.QUEUE


def task_queue(name: str) -> Queue:
    """The declaration of task queue `name`, argument for argument the one a worker consuming
    it makes (Celery's queue for `-Q name`, from CELERY_TASK_CREATE_MISSING_QUEUE_TYPE and
    CELERY_TASK_QUEUE_MAX_PRIORITY): RabbitMQ refuses a declaration that differs from the
    queue's (PRECONDITION_FAILED), which would cost a beat every publish to the queue, or a
    worker its consume. Durable, never exclusive or auto-deleted: the queue, and the persistent
    messages in it, outlive a restart of the broker and the absence of consumers."""
    arguments = {}
    if app_settings.RABBITMQ_QUEUE_TYPE == "quorum":
        arguments["x-queue-type"] = "quorum"
    if app_settings.QUEUE_MAX_PRIORITY is not None:
        arguments["x-max-priority"] = app_settings.QUEUE_MAX_PRIORITY
    return Queue(
        name,
        Exchange(name),
        routing_key=name,
        durable=True,
        exclusive=False,
        auto_delete=False,
        queue_arguments=arguments or None,
    )


def broker_errors() -> tuple[type[BaseException], ...]:
    """What the configured broker raises when it cannot be reached or refuses a call."""
    with app.connection_for_write() as conn:  # not connected: the transport lists its errors
        return (KombuError, OSError, *conn.connection_errors, *conn.channel_errors)


def queue_depth(queue: str) -> int:
    """Messages waiting in the broker queue `queue` (0 when the broker does not know it)."""
    return queue_depths([queue])[queue]


def queue_depths(queues: Iterable[str]) -> dict[str, int]:
    """queue_depth of each of `queues`, over one broker connection.

    On Redis, one pipelined round trip for all of them (an LLEN per priority list): a scrape
    of /metrics asks for every tenant's queue, and a call per queue made 300 queues cost 600
    round trips. On AMQP, a passive declare per queue on the one channel.
    """
    queues = list(queues)
    with app.connection_for_write() as conn:
        if conn.transport.driver_type == "redis":
            return _redis_depths(conn.default_channel, queues)
        depths: dict[str, int] = {}
        channel = conn.channel()
        try:
            for queue in queues:
                try:
                    depths[queue] = channel.queue_declare(queue=queue_name(queue), passive=True).message_count
                except conn.channel_errors:  # no such queue: nothing is waiting in it
                    depths[queue] = 0
                    channel = conn.channel()  # AMQP closed the channel that asked
        finally:
            channel.close()
    return depths


def purge_queues(queues: Iterable[str]) -> dict[str, int]:
    """Drop every message waiting in each of `queues` (on Redis, each priority step's list);
    return how many each held (0 for a queue the broker does not know). One connection."""
    purged: dict[str, int] = {}
    with app.connection_for_write() as conn:
        channel = conn.channel()
        try:
            for queue in queues:
                try:
                    purged[queue] = channel.queue_purge(queue_name(queue)) or 0
                except conn.channel_errors:  # no such queue: nothing waited in it
                    purged[queue] = 0
                    channel = conn.channel()  # AMQP closed the channel that asked
        finally:
            channel.close()
    return purged


def _redis_depths(channel, queues: list[str]) -> dict[str, int]:
    """The depths of `queues` from kombu's Redis channel, in one pipeline: the lists of each
    priority step, named as the channel names them (its client adds global_keyprefix). A list
    that does not exist has length 0; a key that is not a list (WRONGTYPE) counts 0 too."""
    steps = channel.priority_steps
    with channel.conn_or_acquire() as client, client.pipeline(transaction=False) as pipe:
        for queue in queues:
            for step in steps:
                pipe.llen(channel._q_for_pri(queue_name(queue), step))
        sizes = iter(pipe.execute(raise_on_error=False))
    return {queue: sum(size for size in (next(sizes) for _ in steps) if isinstance(size, int)) for queue in queues}


def redis_list_keys(queue: str) -> list[str]:
    """The Redis lists kombu's Redis transport keeps `queue` in: one per priority step, in
    the order workers take from them (the highest Job.priority first)."""
    # Only for a Redis broker: kombu's Redis transport imports redis-py.
    from kombu.transport.redis import PRIORITY_STEPS, Channel

    options = broker_transport_options()
    prefix = options.get("global_keyprefix", "")
    name = queue_name(queue)
    return [
        prefix + (f"{name}{Channel.sep}{step}" if step else name)
        for step in options.get("priority_steps", PRIORITY_STEPS)
    ]
