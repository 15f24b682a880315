"""Chains (docs/chains.md): the end of a parent run wakes the beats on the channel they listen
on (the rest of the chains: tests/integration/ledger/test_chains.py, tests/system/ledger/test_chains.py)."""

from __future__ import annotations

from scheduler_app.dispatch import waker
from scheduler_app.ledger import chains


def test_the_worker_wakes_the_beats_on_their_channel():
    assert chains.wake_beats is waker.wake_beats  # one NOTIFY on the one channel beats LISTEN on
