"""Flexible windows, the pure part: a window such as "daily 01:00-03:00" (or "hourly") parses and
normalises, a bad one is refused naming the field, the least loaded minute is chosen (ties by
the job's key) from a profile that counts other zones by the instant. Placing jobs through the
services, the API, the CLI and the bench is tests/integration/schedules/test_flexible_windows.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from scheduler_app import schedules
from scheduler_app.schedules import placement

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


# --- the pure part ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised", "start", "length"),
    [
        ("daily 01:00-03:00", "daily 01:00-03:00", 60, 120),
        ("  Daily   1:00 - 03:00 ", "daily 01:00-03:00", 60, 120),
        ("daily 23:00-01:00", "daily 23:00-01:00", 23 * 60, 120),  # across midnight
        ("daily 00:00-24:00", "daily 00:00-24:00", 0, 1440),
        ("daily", "daily 00:00-24:00", 0, 1440),
        ("hourly", "hourly", 0, 60),
    ],
)
def test_windows_parse_and_normalise(text, normalised, start, length):
    window = schedules.parse_window(text)

    assert (window.text, window.start, window.length) == (normalised, start, length)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("daily 25:00-03:00", "'25:00' is not a time of day"),
        ("daily 01:00-03:60", "'03:60' is not a time of day"),
        ("daily 01:00-01:00", "is empty: it ends when it starts"),
        ("daily 03:00-01:00", "before it starts at 03:00: a window across midnight"),
        ("nightly", "is not a window"),
        ("", "must be 'hourly', 'daily' or 'daily HH:MM-HH:MM'"),
        (None, "must be 'hourly'"),
    ],
)
def test_bad_windows_are_refused_naming_the_field(text, message):
    with pytest.raises(schedules.InvalidSchedule, match=re.escape(message)) as caught:
        schedules.parse_window(text)
    assert caught.value.field == "flex_window"


def test_the_least_loaded_minute_is_chosen_and_ties_go_by_the_key_the_same_way_every_time():
    assert schedules.choose_minute([3, 1, 2, 1, 5], "acme/a") in (1, 3)
    assert schedules.choose_minute([3, 0, 2, 1, 5], "acme/a") == 1
    flat = [0.0] * 120
    picks = {schedules.choose_minute(flat, f"acme/job-{n}") for n in range(50)}
    assert len(picks) > 30  # different keys start at different minutes
    assert schedules.choose_minute(flat, "acme/x") == schedules.choose_minute(list(flat), "acme/x")


def test_the_profile_counts_other_zones_by_the_instant_and_spreads_jitter():
    window = schedules.parse_window("daily 01:00-03:00")
    neighbours = schedules.Neighbours(
        crons=[
            ("0 1 * * *", "Europe/Berlin", 0, 5),  # 01:00 Berlin
            ("0 0 * * *", "UTC", 600, 10),  # 00:00 UTC is 01:00 Berlin in winter, moved by 0..599 s
            ("0 5 * * *", "UTC", 0, 99),  # outside the window
        ]
    )

    profile = schedules.load_profile(window, "Europe/Berlin", NOW, neighbours)

    days = placement.DAILY_HORIZON_DAYS
    assert profile[0] == pytest.approx((5 + 1) * days)
    assert profile[1:10] == pytest.approx([days] * 9)  # the jitter's even share, a tenth a minute
    assert sum(profile[10:]) == 0


def test_a_window_across_midnight_is_placed_on_either_side_of_it():
    window = schedules.parse_window("daily 23:00-01:00")
    assert window.cron_at(0) == "0 23 * * *"
    assert window.cron_at(119) == "59 0 * * *"
    assert window.bucket_of(datetime(2026, 1, 1, 0, 30)) == 90
    assert window.bucket_of(datetime(2026, 1, 1, 1, 0)) is None
