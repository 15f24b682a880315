"""Beats as nodes (nodes.py): how long a beat may go unseen before it is stale (the rest:
tests/integration/observability/test_nodes.py, tests/system/observability/test_nodes.py)."""

from __future__ import annotations

from scheduler_app.observability import nodes


def test_beat_stale_after_is_two_sleeps_and_a_margin():
    assert nodes.beat_stale_after(5) == 15.0
    assert nodes.beat_stale_after(1) == 9.0  # a beat heartbeats at most every 2 s, even when it turns faster
