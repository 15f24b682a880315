"""A monitored job's status (ledger/checkstatus.py), every transition on a pinned clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app.ledger.checkstatus import DOWN, LATE, NEW, PAUSED, UP, LatestRun, check_status

FIRE = datetime(2024, 1, 1, 3, 0, tzinfo=UTC)
GRACE = 300


def at(seconds: float) -> datetime:
    return FIRE + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("enabled", "latest", "now", "expected"),
    [
        # Never fired, never pinged.
        (True, None, at(0), NEW),
        # A fire has come, no ping yet: late through its grace (the last instant included), then down.
        (True, LatestRun("pending", FIRE), at(0), LATE),
        (True, LatestRun("pending", FIRE), at(GRACE), LATE),
        (True, LatestRun("pending", FIRE), at(GRACE + 1), DOWN),
        # /start: up while the grace from the start runs, down after it.
        (True, LatestRun("running", FIRE, at(100)), at(100 + GRACE), UP),
        (True, LatestRun("running", FIRE, at(100)), at(101 + GRACE), DOWN),
        # Ended by a ping or by the beat.
        (True, LatestRun("succeeded", FIRE, at(10)), at(10_000), UP),
        (True, LatestRun("failed", FIRE, at(10)), at(20), DOWN),
        # Paused wins over whatever the runs say.
        (False, None, at(0), PAUSED),
        (False, LatestRun("failed", FIRE), at(20), PAUSED),
        (False, LatestRun("pending", FIRE), at(GRACE + 1), PAUSED),
    ],
)
def test_check_status(enabled, latest, now, expected):
    assert check_status(enabled=enabled, grace_seconds=GRACE, latest=latest, now=now) == expected


def test_a_check_that_was_down_is_up_again_after_a_successful_ping():
    down = check_status(enabled=True, grace_seconds=GRACE, latest=LatestRun("failed", FIRE), now=at(400))
    up = check_status(enabled=True, grace_seconds=GRACE, latest=LatestRun("succeeded", at(600), at(601)), now=at(601))
    assert (down, up) == (DOWN, UP)
