"""One fire on one line (management/tables.py fire_text, which the admin's "Next 5 fires"
takes): its time in the job's zone, and in UTC only when that zone is not UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler_app.management.tables import fire_text, fires_table

FIRE = datetime(2026, 12, 6, 8, 30, 20, tzinfo=UTC)


def test_a_utc_fire_is_written_once():
    assert fire_text(FIRE, "UTC") == "2026-12-06 08:30:20 UTC"


def test_a_fire_in_another_zone_adds_its_utc_time():
    assert fire_text(FIRE, "Europe/Berlin") == "2026-12-06 09:30:20 CET (08:30:20Z)"
    # Another day in UTC: the UTC date is given too.
    assert fire_text(FIRE.replace(hour=23), "Asia/Tokyo") == "2026-12-07 08:30:20 JST (2026-12-06 23:30:20Z)"


def test_a_utc_table_has_one_time_column():
    assert fires_table([FIRE], "UTC").splitlines() == [
        "#  UTC",
        "-  -----------------------",
        "1  2026-12-06 08:30:20 UTC",
    ]
    assert fires_table([FIRE], "Asia/Tokyo").splitlines()[0].split() == ["#", "Asia/Tokyo", "UTC"]
