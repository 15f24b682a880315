"""Recovery and releases: runs whose lease ran out, retries whose backoff is over, runs no
worker started in time, and buffered (overlap buffer_one) runs whose job went idle.

A queue no live worker consumes gets no copies of its runs (each sweep would add one per
run, forever) and, after CRONFLEET_UNCONSUMED_EXPIRE_SECONDS, its runs are skipped with
reason no_consumer (expire_unconsumed_runs)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import connection, transaction

from scheduler_app.conf import app_settings
from scheduler_app.dispatch import sql
from scheduler_app.dispatch.common import CONCURRENCY_REASON, FIRES_REASON, lock_clause, messages_for, one_pass
from scheduler_app.dispatch.leftovers import purge_leftovers
from scheduler_app.dispatch.publish import RunMessage
from scheduler_app.ledger import autopause, chains
from scheduler_app.models import AuditEvent, append_attempt
from scheduler_app.observability.nodes import last_consumed_at, node_states, queue_consumers
from scheduler_app.queues import queue_depths, queue_name

logger = logging.getLogger("scheduler_app.dispatch")

STALE_SAMPLE_BATCHES = 10  # a sweep looks for stale queues among this many batches of the oldest stale runs
NO_CONSUMER_REASON = (
    "no_consumer: no live worker consumed queue {queue!r} for {seconds} s (CRONFLEET_UNCONSUMED_EXPIRE_SECONDS)"
)

# expire_unconsumed_runs. Kept beside its one caller: dispatch/sql.py belongs to another change
# in flight. Skip up to %(limit)s queued runs of one queue first published before %(before)s:
# the queue had no live worker for as long. A message still in the broker finds the run no
# longer queued when a worker takes it, and changes nothing (the start's compare-and-set).
EXPIRE_UNCONSUMED_RUNS = """
UPDATE scheduler_app_jobrun
   SET state = 'skipped', reason = %(reason)s, finished_at = %(now)s
 WHERE id {any_of}
       SELECT run.id
         FROM scheduler_app_jobrun AS run
         JOIN scheduler_app_job AS job ON job.id = run.job_id
        WHERE run.state = 'queued'
          AND COALESCE(run.dispatched_at, run.created_at) < %(before)s
          AND job.queue = %(queue)s
        ORDER BY run.enqueued_at
        LIMIT %(limit)s
          {lock_run}
       {end_any}
RETURNING id, job_id, tenant_id, attempt
"""


def release_buffered_runs(now: datetime, *, limit: int) -> list[RunMessage]:
    """Queue held (buffer_one) runs whose job has no run still going.

    A quota tenant's such runs are not queued here (that would bypass its quota): they now
    wait for the quota, and release_quota_held_runs queues them within the budget.
    """
    adapt = connection.ops.adapt_datetimefield_value
    fires_head, fires_tail = FIRES_REASON.split("{}")
    concurrency_head, concurrency_tail = CONCURRENCY_REASON.split("{}")
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute(
            sql.HAND_OVER_BUFFERED_RUNS.format(ready=ready_buffered_runs(quota=True)),
            {
                "limit": limit,
                "fires_head": fires_head,
                "fires_tail": fires_tail,
                "concurrency_head": concurrency_head,
                "concurrency_tail": concurrency_tail,
            },
        )
        cursor.execute(
            sql.RELEASE_BUFFERED_RUNS.format(ready=ready_buffered_runs(quota=False)),
            {"now": adapt(now), "limit": limit},
        )
        rows = cursor.fetchall()
    return messages_for(rows)


def ready_buffered_runs(*, quota: bool) -> str:
    """The select of held buffer_one runs ready to go, of tenants with or without a quota."""
    return sql.READY_BUFFERED_RUNS.format(quota="" if quota else "NOT", lock=lock_clause())


def requeue_due_retries(now: datetime, *, limit: int) -> list[RunMessage]:
    """Move retrying runs whose backoff is over back to queued as their next attempt.

    Not throttled by the tenant's dispatch quota: the fire was admitted when it first went
    to the broker (its dispatched_at, which a retry keeps), and a retry is not a new fire.
    """
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            cursor.execute(
                sql.REQUEUE_DUE_RETRIES.format(lock=lock_clause(), **one_pass()),
                {"now": adapt(now), "limit": limit},
            )
            requeued = cursor.fetchall()
    return messages_for([(run_id, attempt, job_id) for run_id, attempt, job_id, _ in requeued])


def mark_lost_runs(now: datetime, *, limit: int) -> int:
    """Take runs whose lease ran out away from their worker: retrying (attempt + 1 follows at
    once) or dead. A dead run counts towards its job's pause after repeated failure and
    starts the jobs chained after it on `dead`, in the same transaction (ledger.autopause,
    ledger.chains). Returns how many."""
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            statement = sql.MARK_LOST_RUNS.format(
                lock=lock_clause(),
                **one_pass(),
                error=sql.LOST_ERROR,
                append=append_attempt("%(now)s", "'lost'", sql.LOST_ERROR),
            )
            cursor.execute(statement, {"now": adapt(now), "limit": limit})
            lost = cursor.fetchall()
        if lost:
            logger.warning("marked %s runs lost (lease expired): %s", len(lost), [row[0] for row in lost][:20])
            AuditEvent.objects.bulk_create(
                AuditEvent(
                    tenant_id=tenant_id,
                    job_id=job_id,
                    run_id=run_id,
                    action="run.lost",
                    actor="beat",
                    detail={"attempt": attempt, "worker": worker, "then": state},
                )
                for run_id, state, attempt, job_id, tenant_id, worker in lost
            )
            autopause.count_ends(
                [(job_id, state) for _, state, _, job_id, _, _ in lost if state == "dead"], actor="beat"
            )
            chains.start_children_of([run_id for run_id, state, *_ in lost if state == "dead"])
    return len(lost)


def republish_stale_runs(now: datetime, *, limit: int) -> list[RunMessage]:
    """Publish again queued runs that no worker started in time.

    A run's message can be lost after its row committed: its beat died before publishing,
    or the broker restarted without persistence. Where the broker queue is empty nothing is
    ahead of the run, so CRONFLEET_REPUBLISH_IDLE_SECONDS is enough; otherwise the run may
    just be waiting its turn and CRONFLEET_DISPATCH_TIMEOUT_SECONDS applies. The queues are
    found among the STALE_SAMPLE_BATCHES * `limit` oldest stale runs (sql.STALE_QUEUES): a
    queue whose stale runs are all younger than those waits until the runs ahead of it are
    published again (after the dispatch timeout) or started. A queue that no live worker
    consumes (observability.nodes.queue_consumers) is passed over and its old runs expire.
    """
    adapt = connection.ops.adapt_datetimefield_value
    idle_before = now - timedelta(seconds=app_settings.REPUBLISH_IDLE_SECONDS)
    busy_before = now - timedelta(seconds=app_settings.DISPATCH_TIMEOUT_SECONDS)
    with connection.cursor() as cursor:
        statement = sql.STALE_QUEUES_PG if connection.vendor == "postgresql" else sql.STALE_QUEUES
        cursor.execute(
            statement, {"before": adapt(max(idle_before, busy_before)), "sample": STALE_SAMPLE_BATCHES * limit}
        )
        queues = [row[0] for row in cursor.fetchall()]
    if not queues:
        return []
    depths = queue_depths(queues)  # one broker connection for all of them, no locks held
    nodes = node_states(now)
    consumers = queue_consumers(nodes)
    stale: list[tuple[int, int, int]] = []
    unconsumed: list[str] = []
    for queue in queues:
        if not consumers.get(queue_name(queue)):
            unconsumed.append(queue)
            continue
        before = idle_before if depths[queue] == 0 else busy_before
        with transaction.atomic(durable=True), connection.cursor() as cursor:
            cursor.execute(
                sql.REPUBLISH_STALE_RUNS.format(lock_run=lock_clause(of="run"), **one_pass()),
                {"now": adapt(now), "before": adapt(before), "queue": queue, "limit": limit - len(stale)},
            )
            stale += cursor.fetchall()
        if len(stale) >= limit:
            break
    for queue in unconsumed:
        expire_unconsumed_runs(queue, now, last_consumed_at(nodes).get(queue_name(queue)), limit=limit)
        passed_over(queue, now, busy_before, limit=limit)
    if unconsumed:  # the messages of runs just skipped, once none of the queue's runs waits
        purge_leftovers(unconsumed, now, consumers=consumers)
    messages = messages_for(stale)
    if messages:
        logger.warning("publishing %s runs again (not started in time)", len(messages))
    return messages


def passed_over(queue: str, now: datetime, before: datetime, *, limit: int) -> None:
    """Stamp the stale runs of a queue no live worker consumes as looked at now, and publish
    nothing: their messages still wait in the broker for a worker, and a copy per sweep would
    grow the queue without bound (100 runs made 400 messages in 15 minutes). The stamp moves
    them behind the other queues' runs in the sweep's sample of the oldest."""
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute(
            sql.REPUBLISH_STALE_RUNS.format(lock_run=lock_clause(of="run"), **one_pass()),
            {"now": adapt(now), "before": adapt(before), "queue": queue, "limit": limit},
        )
        count = cursor.rowcount
    if count:
        logger.warning("queue %r has no live worker: %s runs wait there, not published again", queue_name(queue), count)


def expire_unconsumed_runs(queue: str, now: datetime, consumed_at: datetime | None, *, limit: int) -> int:
    """Skip (reason no_consumer) queued runs of `queue`, which no live worker consumes, once
    no worker consuming it has been seen for CRONFLEET_UNCONSUMED_EXPIRE_SECONDS (consumed_at:
    when one last was, None: not within the nodes' retention) and the runs were first
    published at least as long ago. Returns how many."""
    expire = app_settings.UNCONSUMED_EXPIRE_SECONDS
    before = now - timedelta(seconds=expire)
    if not expire or (consumed_at is not None and consumed_at > before):
        return 0
    adapt = connection.ops.adapt_datetimefield_value
    reason = NO_CONSUMER_REASON.format(queue=queue_name(queue), seconds=expire)
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            cursor.execute(
                EXPIRE_UNCONSUMED_RUNS.format(lock_run=lock_clause(of="run"), **one_pass()),
                {"now": adapt(now), "before": adapt(before), "queue": queue, "limit": limit, "reason": reason[:500]},
            )
            expired = cursor.fetchall()
        if expired:
            logger.warning(
                "skipped %s runs of queue %r: no live worker for %s s", len(expired), queue_name(queue), expire
            )
            AuditEvent.objects.bulk_create(
                AuditEvent(
                    tenant_id=tenant_id,
                    job_id=job_id,
                    run_id=run_id,
                    action="run.no_consumer",
                    actor="beat",
                    detail={"attempt": attempt, "queue": queue_name(queue)},
                )
                for run_id, job_id, tenant_id, attempt in expired
            )
    return len(expired)
