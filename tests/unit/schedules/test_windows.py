"""Maintenance windows' times: a one-off window open from its start until just before its end, a
recurring one following its zone's wall clock across DST, overlapping openings merged (the
rest: tests/integration/schedules/test_windows.py, tests/system/schedules/test_windows.py)."""

from __future__ import annotations

from datetime import timedelta

from scheduler_app.schedules.windows import WindowTimes, next_opening, open_at
from tests.conftest import utc

LONDON = "Europe/London"


# --- times -------------------------------------------------------------------------------


def test_a_one_off_window_is_open_from_its_start_until_just_before_its_end():
    times = WindowTimes(starts_at=utc(2026, 6, 1, 10), ends_at=utc(2026, 6, 1, 11))
    assert open_at(times, utc(2026, 6, 1, 10)) == (utc(2026, 6, 1, 10), utc(2026, 6, 1, 11))
    assert open_at(times, utc(2026, 6, 1, 11)) is None
    assert open_at(times, utc(2026, 6, 1, 9, 59)) is None
    assert next_opening(times, utc(2026, 6, 1, 9)) == (utc(2026, 6, 1, 10), utc(2026, 6, 1, 11))


def test_a_recurring_window_follows_its_zones_wall_clock_across_dst():
    # Saturdays 01:00-02:00 in London: 01:00 UTC in winter, 00:00 UTC in summer.
    times = WindowTimes(zone=LONDON, cron="0 1 * * 6", duration=timedelta(minutes=60))
    assert open_at(times, utc(2026, 3, 21, 1, 30)) == (utc(2026, 3, 21, 1), utc(2026, 3, 21, 2))
    assert open_at(times, utc(2026, 3, 21, 0, 30)) is None
    assert open_at(times, utc(2026, 4, 4, 0, 30)) == (utc(2026, 4, 4, 0), utc(2026, 4, 4, 1))
    assert open_at(times, utc(2026, 4, 4, 1, 30)) is None
    assert next_opening(times, utc(2026, 3, 22)) == (utc(2026, 3, 28, 1), utc(2026, 3, 28, 2))  # the eve of the change


def test_overlapping_openings_merge_into_one_interval():
    times = WindowTimes(cron="0,10 * * * *", duration=timedelta(minutes=15))
    assert open_at(times, utc(2026, 6, 1, 10, 12)) == (utc(2026, 6, 1, 10), utc(2026, 6, 1, 10, 25))
    assert open_at(times, utc(2026, 6, 1, 10, 25)) is None
