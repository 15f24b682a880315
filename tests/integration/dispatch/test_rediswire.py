"""The beat's Redis publish (dispatch/rediswire.py) against the real Redis: each message it
pushes is the message kombu's own Producer.publish pushes for the same run, in the same
list, and kombu's channel reads it back as Celery's message."""

import json
import uuid

import pytest
from celery import current_app as app

from scheduler_app.dispatch import rediswire
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.queues import redis_list_keys

pytestmark = pytest.mark.django_db


def raw_messages(queue: str) -> list[tuple[str, dict]]:
    """(list key, envelope) of each message waiting in `queue`, removed."""
    with app.connection_for_read() as conn:
        client = conn.default_channel.client
        found = []
        for key in redis_list_keys(queue):
            found += [(key, json.loads(raw)) for raw in reversed(client.lrange(key, 0, -1))]
            client.delete(key)
    return found


def runs_of(tenant, queue: str) -> list[RunMessage]:
    """Runs alone at three priorities and two time limits, one with a job name JSON must
    escape, and three whose job shares messages (Job.batch)."""
    return [
        RunMessage(101, 1, queue, 60, priority=0, tenant_id=tenant.id, name="plain"),
        RunMessage(102, 2, queue, 60, priority=9, tenant_id=tenant.id, name='naïve "quoted" \\ job'),
        RunMessage(103, 1, queue, 3600, priority=5),
        *(RunMessage(200 + i, 1, queue, 30, priority=7, batch=True, tenant_id=tenant.id, name="b") for i in range(3)),
    ]


def published(messages: list[RunMessage], queue: str, *, kombu: bool, monkeypatch) -> list[tuple[str, dict]]:
    with monkeypatch.context() as patch:
        if kombu:
            patch.setattr(rediswire.RedisWire, "handles", lambda self, name: False)
        assert publish_runs(messages) == len(messages)
    return raw_messages(queue)


def test_each_message_is_the_one_kombu_writes_in_the_same_list(tenant, monkeypatch):
    queue = f"wire-{uuid.uuid4().hex[:8]}"
    runs = runs_of(tenant, queue)
    ours = published(runs, queue, kombu=False, monkeypatch=monkeypatch)
    theirs = published(runs, queue, kombu=True, monkeypatch=monkeypatch)

    assert len(ours) == len(theirs) == 4  # three alone, one batch of three
    tags = [envelope["properties"].pop("delivery_tag") for _, envelope in ours + theirs]
    assert len(set(tags)) == len(tags)
    for (our_key, our_envelope), (their_key, their_envelope) in zip(ours, theirs, strict=True):
        assert our_key == their_key
        assert our_envelope == their_envelope
    shadows = [envelope["headers"]["shadow"] for _, envelope in ours]
    assert shadows[0] == f'{tenant.slug}/naïve "quoted" \\ job'  # priority 9 first


def test_kombu_reads_a_pushed_message_back_as_celery_s(tenant):
    queue = f"wire-{uuid.uuid4().hex[:8]}"
    publish_runs([RunMessage(7, 3, queue, 60, priority=4, tenant_id=tenant.id, name="read")])
    with app.connection_for_read() as conn:
        message = conn.default_channel.basic_get(queue)
        assert message is not None
        args, kwargs, _embed = message.decode()
        assert (args, kwargs) == ([7, 3], {})
        assert message.headers["task"] == "scheduler_app.execute_run"
        assert message.headers["id"] == message.properties["correlation_id"] == "cronfleet-run-7-3"
        assert message.headers["shadow"] == f"{tenant.slug}/read"
        message.ack()
        assert conn.default_channel.basic_get(queue) is None


def test_delivery_tags_differ_between_publishers():
    with app.connection_for_write() as conn:
        first, second = rediswire.RedisWire(conn.default_channel), rediswire.RedisWire(conn.default_channel)
        tags = {next(wire._tags) for wire in (first, second) for _ in range(3)}
    assert len(tags) == 6


def test_a_queue_with_an_expiry_is_left_to_kombu(monkeypatch):
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        monkeypatch.setattr(channel, "_expires", {"expiring": 60_000})
        wire = rediswire.RedisWire(channel)
        assert not wire.handles("expiring")
        assert wire.handles("other")
