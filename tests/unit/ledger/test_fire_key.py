"""A fire's key: the same for one instant however the time is written, a new one for
another instant (the webhook-id a receiver deduplicates on)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler_app.models.core import fire_key

BERLIN = ZoneInfo("Europe/Berlin")


def test_one_instant_one_key_in_any_zone():
    at = datetime(2026, 3, 1, 9, 30, 15, 250000, tzinfo=UTC)
    assert fire_key(7, at) == "job7@20260301T093015.250000Z"
    assert fire_key(7, at.astimezone(BERLIN)) == fire_key(7, at)
    assert fire_key(8, at) == "job8@20260301T093015.250000Z"


def test_the_repeated_hour_of_a_zone_keeps_two_keys():
    # 02:30 comes twice in Berlin on 2026-10-25; the two compare equal as datetimes of one
    # zone, but are an hour apart, and so are their keys, in either order.
    first = datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN)
    second = first.replace(fold=1)
    assert first == second
    for a, b in ((first, second), (second, first)):
        assert fire_key(1, a) != fire_key(1, b)
    assert fire_key(1, first) == "job1@20261025T003000.000000Z"
    assert fire_key(1, second) == "job1@20261025T013000.000000Z"


def test_every_instant_its_own_key():
    start = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)
    keys = {fire_key(1, start + timedelta(microseconds=n)) for n in range(2000)}
    assert len(keys) == 2000
