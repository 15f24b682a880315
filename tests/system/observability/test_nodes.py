"""Real beats and workers as nodes (nodes.py) and /readyz: a SIGSTOPped beat shows as stale and
readiness fails until it resumes; a real worker registers its queue, heartbeats from a thread
and stops cleanly."""

from __future__ import annotations

import os
import signal

import pytest

from scheduler_app.models import Node, NodeKind
from tests.conftest import wait_for
from tests.integration.observability.test_nodes import states

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

    node = wait_for(
        lambda: Node.objects.filter(kind=NodeKind.WORKER, pid=worker.pid).first(), timeout=30, what="the worker's node"
    )
    first_seen = node.last_seen_at
    wait_for(
        lambda: Node.objects.get(id=node.id).last_seen_at > first_seen,
        timeout=30,
        what="a heartbeat with no run at all",
    )

    node.refresh_from_db()
    assert node.queues == [queue_name] and node.name.startswith("worker-")
    assert node.activity.startswith("idle") and states(NodeKind.WORKER)[node.name] == "live"
    processes.stop(worker)
    assert states(NodeKind.WORKER)[node.name] == "stopped"
