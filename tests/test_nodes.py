"""Beats and workers as nodes (nodes.py), /readyz, and the admin's list of them: a frozen
beat shows as stale and takes readiness with it; a real worker registers its queues."""

from __future__ import annotations

import functools
import os
import signal
from datetime import timedelta
from unittest import mock

import pytest
from django.urls import reverse
from kombu import Connection

from project.celery import app
from scheduler_app.models import Node, NodeKind, db_now
from scheduler_app.observability import nodes
from scheduler_app.observability.nodes import Registration, node_states
from tests.conftest import wait_for


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


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


def test_beat_stale_after_is_two_sleeps_and_a_margin():
    assert nodes.beat_stale_after(5) == 15.0
    assert nodes.beat_stale_after(1) == 9.0  # a beat heartbeats at most every 2 s, even when it turns faster


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
    assert (node.activity, node.queues, node.pid, node.version) == ("turn: 3 claimed", ["q1", "q2"], os.getpid(),
                                                                    nodes.VERSION)


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


# --- real processes -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_sigstopped_beat_shows_as_stale_and_readyz_fails_until_it_resumes(client, processes):
    beat = processes.beat("beat", "--max-sleep", "1")  # stale after 2 x 2 + 5 = 9 s without a heartbeat
    wait_for(lambda: client.get("/readyz").status_code == 200, timeout=30, what="the beat to register")
    [node] = Node.objects.filter(kind=NodeKind.BEAT, pid=beat.pid)
    assert (node.pid, node.stale_after_seconds, node.name) == (beat.pid, 9.0, f"beat@{node.host}:{beat.pid}")

    os.killpg(beat.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: client.get("/readyz").status_code == 503, timeout=30, what="readyz to fail")
        assert states(NodeKind.BEAT)[node.name] == "stale"
    finally:
        os.killpg(beat.pid, signal.SIGCONT)

    wait_for(lambda: client.get("/readyz").status_code == 200, timeout=30, what="readyz to recover")
    processes.stop(beat)
    assert states(NodeKind.BEAT)[node.name] == "stopped"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_registers_its_queue_heartbeats_from_a_thread_and_stops_cleanly(processes, queue_name):
    worker = processes.worker(queue_name, name="worker")

    node = wait_for(lambda: Node.objects.filter(kind=NodeKind.WORKER, pid=worker.pid).first(), timeout=30,
                    what="the worker's node")
    first_seen = node.last_seen_at
    wait_for(lambda: Node.objects.get(id=node.id).last_seen_at > first_seen, timeout=30,
             what="a heartbeat with no run at all")

    node.refresh_from_db()
    assert node.queues == [queue_name] and node.name.startswith("worker-")
    assert node.activity.startswith("idle") and states(NodeKind.WORKER)[node.name] == "live"
    processes.stop(worker)
    assert states(NodeKind.WORKER)[node.name] == "stopped"
