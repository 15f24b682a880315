"""A pause's end as arithmetic: checked, judged due, and a bulk pause's fingerprint."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app import schedules

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("until", "expiry", "problem"),
    [
        (None, "", None),
        (NOW + HOUR, "", None),
        (NOW + HOUR, "resume", None),
        (NOW + HOUR, "alert", None),
        (NOW + schedules.MAX_PAUSE, "alert", None),
        (None, "resume", "on_expiry"),
        (NOW + HOUR, "explode", "on_expiry"),
        (NOW, "alert", "until"),
        (NOW - HOUR, "", "until"),
        (NOW + schedules.MAX_PAUSE + HOUR, "", "until"),
        (datetime(2026, 3, 2, 12, 0), "", "until"),  # no offset
    ],
)
def test_pause_problem_names_the_field_at_fault(until, expiry, problem):
    found = schedules.pause_problem(until, expiry, NOW)

    assert (found[0] if found else None) == problem


@pytest.mark.parametrize(
    ("enabled", "until", "expiry", "alerted_at", "due"),
    [
        (True, NOW - HOUR, "resume", None, None),  # running: nothing to do
        (False, None, "", None, None),  # paused with no end
        (False, NOW + HOUR, "resume", None, None),  # not yet
        (False, NOW, "resume", None, "resume"),  # the end is reached at its instant
        (False, NOW - HOUR, "alert", None, "alert"),
        (False, NOW - HOUR, "", None, "alert"),  # an end with no word on it alerts
        (False, NOW - HOUR, "alert", NOW - HOUR / 2, None),  # alerted once already
    ],
)
def test_expiry_due(enabled, until, expiry, alerted_at, due):
    assert schedules.expiry_due(enabled=enabled, until=until, expiry=expiry, alerted_at=alerted_at, now=NOW) == due


def test_set_fingerprint_is_of_the_set_not_its_order():
    assert schedules.set_fingerprint("tag:night", [3, 1, 2]) == schedules.set_fingerprint("tag:night", [1, 2, 3, 3])


def test_set_fingerprint_changes_with_a_job_added_or_removed_or_another_scope():
    base = schedules.set_fingerprint("tag:night", [1, 2, 3])

    assert schedules.set_fingerprint("tag:night", [1, 2, 3, 4]) != base
    assert schedules.set_fingerprint("tag:night", [1, 2]) != base
    assert schedules.set_fingerprint("tenant", [1, 2, 3]) != base
    assert len(base) == 16
