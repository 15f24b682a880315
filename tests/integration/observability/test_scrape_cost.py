"""A /metrics scrape costs the same few broker round trips at 300 tenant queues as at one
(issue 22 item 8: a broker call per queue made the scrape 15x slower). Counted at the real
Redis client's socket writes (each request or pipeline is one write, then its answers)."""

from __future__ import annotations

import pytest
import redis.connection
from prometheus_client.parser import text_string_to_metric_families

from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import NodeKind
from scheduler_app.observability.nodes import Registration
from scheduler_app.queues import queue_depths
from tests.conftest import take_broker_messages


@pytest.fixture
def round_trips(monkeypatch):
    """A counter of the commands (or pipelines) the Redis client sends: one round trip each."""
    sent = {"count": 0}
    send = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, *args, **kwargs):
        sent["count"] += 1
        return send(self, command, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return sent


def trips(round_trips, call) -> tuple[int, object]:
    before = round_trips["count"]
    value = call()
    return round_trips["count"] - before, value


@pytest.fixture
def many_queues(queue_name):
    names = [f"{queue_name}-{n}" for n in range(300)]
    publish_runs(
        [
            RunMessage(901, 1, names[0], 60),
            RunMessage(902, 1, names[0], 60, priority=9),
            RunMessage(903, 1, names[299], 60),
        ]
    )
    yield names
    for name in (names[0], names[299]):
        take_broker_messages(name)


def test_queue_depths_of_300_queues_take_as_many_round_trips_as_one(many_queues, round_trips):
    queue_depths(many_queues[:1])  # the first call pays for imports and the transport's setup

    one, _ = trips(round_trips, lambda: queue_depths(many_queues[:1]))
    many, depths = trips(round_trips, lambda: queue_depths(many_queues))

    assert (depths[many_queues[0]], depths[many_queues[299]], sum(depths.values())) == (2, 1, 3)
    assert many == one <= 20, (one, many)  # a connection's setup (14 on Redis 7, redis-py 8) and one pipeline


def test_a_metrics_scrape_of_300_queues_costs_a_bounded_number_of_broker_round_trips(
    client, db, many_queues, round_trips
):
    Registration(NodeKind.WORKER, "w@many", stale_after=15, queues=many_queues).register()
    client.get("/metrics")

    count, response = trips(round_trips, lambda: client.get("/metrics"))

    depths = {
        s.labels["queue"]: s.value
        for family in text_string_to_metric_families(response.content.decode())
        if family.name == "cronfleet_queue_depth"
        for s in family.samples
    }
    assert set(many_queues) <= set(depths) and depths[many_queues[0]] == 2
    assert count <= 20, count  # 600 on the call per queue (an EXISTS and an LLEN pipeline each)
