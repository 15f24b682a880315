"""Leases, heartbeats, lost runs and the outbox sweep, against the real PostgreSQL and Redis."""

from datetime import timedelta

import pytest
import redis
from django.conf import settings as django_settings
from django.db.models.functions import Now

from scheduler_app import dispatch
from scheduler_app.dispatch import sql
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import AuditEvent, JobRun, Node, NodeKind, RunState, db_now
from scheduler_app.queues import queue_depth
from scheduler_app.worker import execution
from tests.conftest import NOW, rows_read, utc


@pytest.fixture
def broker_queue(queue_name):
    """A broker queue a live worker consumes (by its node row): the sweep publishes again only there."""
    Node.objects.create(
        kind=NodeKind.WORKER,
        name=f"w@{queue_name}",
        host="h",
        pid=1,
        queues=[queue_name],
        started_at=Now(),
        last_seen_at=Now(),
        stale_after_seconds=60,
    )
    yield queue_name
    client = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    client.delete(queue_name)
    client.close()


def test_a_run_whose_lease_ran_out_is_lost_and_retried_as_the_next_attempt(make_job, make_run):
    run = make_run(
        make_job(max_attempts=3), state=RunState.RUNNING, worker="w1", lease_expires_at=NOW - timedelta(seconds=1)
    )
    alive = make_run(
        state=RunState.RUNNING, scheduled_at=utc(2024, 1, 1, 0, 1), lease_expires_at=NOW + timedelta(seconds=5)
    )

    assert dispatch.recovery.mark_lost_runs(NOW, limit=10) == 1
    messages = dispatch.recovery.requeue_due_retries(NOW, limit=10)

    run.refresh_from_db()
    alive.refresh_from_db()
    assert (run.state, run.attempt, alive.state) == ("queued", 2, "running")
    assert run.error == "lost: lease expired (worker w1)"
    assert [(m.run_id, m.attempt) for m in messages] == [(run.id, 2)]
    event = AuditEvent.objects.get(run_id=run.id, action="run.lost")
    assert event.detail == {"attempt": 1, "worker": "w1", "then": "retrying"}


def test_a_lost_run_on_its_last_attempt_is_dead(make_job, make_run):
    run = make_run(
        make_job(max_attempts=2), state=RunState.RUNNING, attempt=2, lease_expires_at=NOW - timedelta(seconds=1)
    )

    dispatch.recovery.mark_lost_runs(NOW, limit=10)

    run.refresh_from_db()
    assert (run.state, run.next_attempt_at) == ("dead", None)


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_keeps_a_long_run_alive_past_its_first_lease(make_job, make_run, settings):
    settings.CRONFLEET_LEASE_SECONDS, settings.CRONFLEET_HEARTBEAT_SECONDS = 2, 1
    run = make_run(make_job(task_name="scheduler_app.sleep", kwargs={"seconds": 3.5}))

    outcome = execution.execute_run(run.id, 1, worker="w")

    run.refresh_from_db()
    assert outcome.state == "succeeded"
    assert (run.heartbeat_at - run.started_at).total_seconds() >= 2.5  # renewed at least three times
    assert not AuditEvent.objects.filter(run_id=run.id, action="run.stale_write_rejected").exists()


def test_renew_lease_refuses_a_superseded_attempt(make_run):
    run = make_run(state=RunState.RUNNING, attempt=2, lease_expires_at=NOW)

    assert execution.renew_lease(run.id, 1) is False
    assert execution.renew_lease(run.id, 2) is True
    run.refresh_from_db()
    assert run.lease_expires_at > db_now() + timedelta(seconds=django_settings.CRONFLEET_LEASE_SECONDS - 5)


def test_queued_runs_never_started_are_published_again(make_job, make_run, broker_queue, settings):
    settings.CRONFLEET_REPUBLISH_IDLE_SECONDS = 15
    job = make_job(queue=broker_queue)
    now = db_now()
    stale = make_run(job, enqueued_at=now - timedelta(seconds=20))
    fresh = make_run(job, scheduled_at=utc(2024, 1, 1, 0, 1), enqueued_at=now - timedelta(seconds=5))

    messages = dispatch.recovery.republish_stale_runs(now, limit=10)

    assert [(m.run_id, m.attempt, m.queue) for m in messages] == [(stale.id, 1, broker_queue)]
    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.enqueued_at == now and fresh.enqueued_at == now - timedelta(seconds=5)
    assert dispatch.recovery.republish_stale_runs(now, limit=10) == []  # not again until it is stale again


def test_a_busy_queue_gets_the_longer_dispatch_timeout(make_job, make_run, broker_queue, settings):
    settings.CRONFLEET_REPUBLISH_IDLE_SECONDS = 15
    settings.CRONFLEET_DISPATCH_TIMEOUT_SECONDS = 300
    job = make_job(queue=broker_queue)
    now = db_now()
    waiting = make_run(job, enqueued_at=now - timedelta(seconds=60))
    publish_runs([RunMessage(999999, 1, broker_queue, 60)])  # someone else's message ahead of it
    assert queue_depth(broker_queue) == 1

    assert dispatch.recovery.republish_stale_runs(now, limit=10) == []
    waiting.enqueued_at = now - timedelta(seconds=301)
    waiting.save(update_fields=["enqueued_at"])
    assert [m.run_id for m in dispatch.recovery.republish_stale_runs(now, limit=10)] == [waiting.id]


def test_the_sweep_looks_for_stale_queues_among_the_oldest_runs_only(make_job, broker_queue, settings):
    """Not every queued run: during a spike all of them are older than the idle delay."""
    settings.CRONFLEET_REPUBLISH_IDLE_SECONDS = 15
    job = make_job(queue=broker_queue)
    now = db_now()
    JobRun.objects.bulk_create(
        JobRun(
            job=job,
            tenant=job.tenant,
            scheduled_at=utc(2024, 1, 1) + timedelta(minutes=i),
            state=RunState.QUEUED,
            created_at=NOW,
            enqueued_at=now - timedelta(seconds=20 + i % 7),
        )
        for i in range(3000)
    )
    read, plan = rows_read(
        sql.STALE_QUEUES, {"before": now - timedelta(seconds=15), "sample": 100}, "scheduler_app_jobrun"
    )
    assert read <= 100, plan  # of 3,000 stale runs
    assert len(dispatch.recovery.republish_stale_runs(now, limit=10)) == 10  # the queue is found, its oldest go again


@pytest.mark.parametrize(
    ("setting", "expected"),
    [("lock_timeout", "5s"), ("statement_timeout", "1min"), ("idle_in_transaction_session_timeout", "10s")],
)
def test_every_database_session_has_bounded_waits(db, setting, expected):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {setting}")
        assert cursor.fetchone()[0] == expected


def test_database_connections_use_tcp_keepalives(db):
    from django.db import connection

    connection.ensure_connection()
    params = connection.connection.info.get_parameters()
    assert (params["keepalives"], params["keepalives_idle"], params["connect_timeout"]) == ("1", "30", "10")
