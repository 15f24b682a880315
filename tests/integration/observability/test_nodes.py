"""Beats and workers as nodes (nodes.py), /readyz, and the admin's list of them: a node is
live, stale or stopped by its own bound, a heartbeat registers again, /readyz needs a live
beat and the broker. A frozen real beat taking readiness with it, and a real worker
registering its queues: tests/system/observability/test_nodes.py."""

from __future__ import annotations

import functools
import os
from datetime import timedelta
from unittest import mock

import pytest
from django.urls import reverse
from kombu import Connection

from project.celery import app
from scheduler_app.models import Node, NodeKind, db_now
from scheduler_app.observability import nodes
from scheduler_app.observability.nodes import Registration, node_states


@pytest.fixture
def db(db):
    """The test's transaction, without the nodes other tests' processes left committed
    (a `runbeat --once` registers, then marks itself stopped)."""
    Node.objects.all().delete()


def registered(kind=NodeKind.BEAT, name="beat@h:1", *, stale_after=15.0, seen_ago: float = 0.0) -> Registration:
    registration = Registration(kind, name, stale_after=stale_after)
    registration.register()
    if seen_ago:
        Node.objects.filter(id=registration.id).update(last_seen_at=db_now() - timedelta(seconds=seen_ago))
    return registration


def states(kind=None) -> dict[str, str]:
    return {found.node.name: found.state for found in node_states(db_now(), kind=kind)}


def test_a_node_is_live_within_its_own_bound_stale_after_it_and_stopped_when_it_says_so(db):
    registered(name="fresh")
    registered(name="late", seen_ago=16)
    registered(name="patient", stale_after=60, seen_ago=16)
    registered(name="gone").stop()

    assert states() == {"fresh": "live", "late": "stale", "patient": "live", "gone": "stopped"}


def test_a_heartbeat_moves_last_seen_by_the_databases_clock_and_says_what_the_node_does(db):
    registration = registered(name="b", seen_ago=100)

    registration.heartbeat("turn: 3 claimed", queues=["q2", "q1", "q1"])

    node = Node.objects.get(id=registration.id)
    assert states() == {"b": "live"}
    assert (node.activity, node.queues, node.pid, node.version) == (
        "turn: 3 claimed",
        ["q1", "q2"],
        os.getpid(),
        nodes.VERSION,
    )


def test_a_heartbeat_registers_again_when_the_row_was_pruned_and_old_rows_are_pruned(db):
    registration = registered(name="b")
    old = registered(name="long-gone", seen_ago=nodes.NODE_RETENTION.total_seconds() + 60)
    Node.objects.filter(id=registration.id).delete()

    registration.heartbeat("back")

    assert set(Node.objects.values_list("name", flat=True)) == {"b"}  # registering pruned long-gone
    assert registration.id != old.id and Node.objects.get(id=registration.id).activity == "back"


# --- /readyz ------------------------------------------------------------------------------


def test_readyz_is_503_without_a_live_beat_and_200_with_one(client, db):
    registered(name="frozen", seen_ago=60)

    refused = client.get("/readyz")
    registered(name="live")
    ready = client.get("/readyz")

    assert refused.status_code == 503
    assert refused.json()["beats"]["live"] == 0 and refused.json()["beats"]["stale"] == 1
    assert "no beat seen" in refused.json()["beats"]["error"]
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "database": "ok", "broker": "ok", "beats": {"live": 1, "stale": 1}}


def test_readyz_is_503_naming_the_error_when_the_broker_does_not_answer(client, db):
    registered(name="live")

    nowhere = functools.partial(Connection, "redis://127.0.0.1:1/0")  # nothing listens there
    with mock.patch.object(app, "connection_for_write", nowhere):
        response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok" and body["broker"] not in ("", "ok") and body["beats"]["live"] == 1


def test_healthz_stays_a_database_check_that_ignores_beats(client, db):
    registered(name="frozen", seen_ago=60)

    assert client.get("/healthz").status_code == 200


# --- the admin ------------------------------------------------------------------------------


def test_the_admin_lists_nodes_with_their_state(admin_client):
    registered(name="beat@a:1")
    registered(NodeKind.WORKER, "worker@b", stale_after=15, seen_ago=30).heartbeat("idle, 3 done")
    Node.objects.filter(name="worker@b").update(last_seen_at=db_now() - timedelta(seconds=30))

    page = admin_client.get(reverse("admin:scheduler_app_node_changelist"))

    assert page.status_code == 200
    text = page.content.decode()
    assert "beat@a:1" in text and "worker@b" in text and "idle, 3 done" in text
    assert ">live<" in text and ">stale<" in text
    assert admin_client.get(reverse("admin:scheduler_app_node_add")).status_code == 403
