"""Which broker queue names a job may use. Pure: no database, no broker.

A job's queue is a name its tenant types, and the beat publishes to it with the broker's
own key space: on Redis a queue is a list key beside kombu's bookkeeping keys
(`_kombu.binding.*`, `unacked`, `unacked_index`, ...), on RabbitMQ `amq.*` is reserved by
the server. One tenant naming such a key made every publish of every beat turn fail
(WRONGTYPE), so names follow a strict pattern and never name a broker- or Celery-internal
queue. A deployment can also list the queues its workers consume (CRONFLEET_QUEUES).
"""

from __future__ import annotations

import re

from django.conf import settings

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
    if name.startswith(RESERVED_PREFIXES) or name.endswith(RESERVED_SUFFIXES) or any(
            part in name for part in RESERVED_PARTS):
        raise InvalidQueue(f"{name!r} is a name the broker or Celery keeps for itself")
    allowed = settings.CRONFLEET_QUEUES
    if allowed and name not in allowed and name != settings.CELERY_TASK_DEFAULT_QUEUE:
        raise InvalidQueue(f"{name!r} is not one of this deployment's queues ({', '.join(allowed)}; CRONFLEET_QUEUES)")
    return name
