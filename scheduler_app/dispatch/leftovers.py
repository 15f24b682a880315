"""Messages nobody will take (issue 40): a queue no live worker consumes keeps the messages
of runs that are gone, deleted with their job, or skipped there as no_consumer. A worker
that consumes the queue later would only drop them, and until then they take the broker's
memory. Once such a queue has no queued or running run left in the ledger, every message in
it is of that kind, and it is purged.

A run recorded by a beat between the check and the purge may lose its message: it stays
queued, so a worker that comes to consume the queue gets it published again (the stale-run
sweep), and with none it is skipped as no_consumer, as it would have been with its message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from scheduler_app.conf import app_settings
from scheduler_app.models import JobRun, RunState, db_now
from scheduler_app.observability.nodes import node_states, queue_consumers
from scheduler_app.queues import broker_errors, purge_queues, queue_name

logger = logging.getLogger(__name__)

OPEN = (RunState.QUEUED, RunState.RUNNING)  # runs whose message may still be in the broker


def purge_leftovers(queues: Iterable[str], now: datetime, *, consumers: dict[str, int] | None = None) -> dict[str, int]:
    """Purge each broker queue of `queues` (job queue values; blank is the default queue) that
    no live worker consumes (`consumers`: queue_consumers() where the caller has them) and no
    open run of the ledger is on. Returns {queue name: messages purged} for those purged."""
    if consumers is None:
        consumers = queue_consumers(node_states(now))
    idle = {queue_name(queue) for queue in queues} - {name for name, count in consumers.items() if count}
    if not idle:
        return {}
    values = idle | ({""} if app_settings.QUEUE in idle else set())  # a blank queue is the default
    busy = {
        queue_name(queue)
        for queue in JobRun.objects.filter(state__in=OPEN, job__queue__in=values)
        .values_list("job__queue", flat=True)
        .distinct()
    }
    left = sorted(idle - busy)
    if not left:
        return {}
    purged = purge_queues(left)
    for name, count in purged.items():
        if count:
            logger.warning(
                "purged %s messages of queue %r: no live worker consumes it and no run waits there", count, name
            )
    return purged


def purge_after_commit(queues: Iterable[str]) -> None:
    """Purge the leftovers of `queues` once the transaction deleting their jobs commits (a job
    and its runs gone: their messages on a queue nobody consumes stay otherwise). A broker
    that does not answer costs the purge only, never the deletion: the next deletion on the
    queue, or the stale-run sweep, purges it."""
    names = sorted(set(queues))

    def purge() -> None:
        try:
            purge_leftovers(names, db_now())
        except broker_errors() as exc:
            logger.warning("could not purge the messages of deleted jobs from %s: %s", ", ".join(names), exc)

    transaction.on_commit(purge)
