"""Cron fires around every DST change of 2024-2026, checked against a brute-force reference.

The reference knows nothing of cronsim or of schedules.py: it walks real time minute by minute
and applies Debian cron's rules as DESIGN.md section 6 states them.

- A job with `*` at the start of its minute or hour field (hourly and finer) fires at every
  real instant whose wall time matches; a wall time that does not exist has no fire.
- Any other job (a fixed-time job) fires at a wall time the first time the clock shows it:
  once in a repeated autumn hour, and right after a spring-forward gap for the wall times the
  gap skipped.

Only a window of a few hours around each change is walked, which keeps the file near two
seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.schedules import Schedule, next_fire_after, validate
from tests.unit.schedules.test_schedules import CRON_EXPRESSIONS

MINUTE = timedelta(minutes=1)
WINDOW = timedelta(hours=2)  # each side of a change; no zone here shifts by more than an hour
US = timedelta(microseconds=1)

ZONES = [
    "Australia/Lord_Howe",  # 30-minute shift at 02:00
    "Pacific/Chatham",  # +12:45/+13:45, changes at 02:45 standard time
    "Europe/Dublin",  # "negative DST": the standard offset is the summer one
    "America/Santiago",  # changes at midnight
    "America/Havana",  # changes at midnight (spring) and 01:00 (autumn)
    "Africa/Casablanca",  # +01 all year but an hour back for Ramadan, at 03:00/02:00
    "America/New_York",
    "Australia/Sydney",
]

EXPRESSIONS = [
    # hourly and finer (a `*` in the minute or hour field)
    "* * * * *",
    "*/15 * * * *",
    "30 * * * *",
    "15,45 * * * *",
    "* 2 * * *",
    "*/10 1-3 * * *",
    "0 */2 * * *",
    # fixed times
    "30 2 * * *",
    "0 0 * * *",
    "30 23 * * *",
    "45 1-3 * * *",
    "0,30 0-3 * * *",
    "0-59 1 * * *",
    "0-55/5 1 * * *",
    "10-50/20 0,2 * * 0",
]


def parse_field(text: str, low: int, high: int) -> set[int]:
    """The values of one cron field: lists of `*`, `n`, `a-b`, each with an optional `/step`."""
    values: set[int] = set()
    for part in text.split(","):
        spec, _, step = part.partition("/")
        if spec == "*":
            first, last = low, high
        elif "-" in spec:
            first, last = map(int, spec.split("-"))
        else:
            first, last = int(spec), high if step else int(spec)
        values.update(range(first, last + 1, int(step or 1)))
    return values


class Expression:
    def __init__(self, text: str) -> None:
        minute, hour, dom, month, dow = text.split()
        self.minutes = parse_field(minute, 0, 59)
        self.hours = parse_field(hour, 0, 23)
        self.doms = parse_field(dom, 1, 31)
        self.months = parse_field(month, 1, 12)
        self.dows = {day % 7 for day in parse_field(dow, 0, 7)}
        self.either_day = not (dom.startswith("*") or dow.startswith("*"))  # Vixie/Debian OR
        self.fixed_time = not (minute.startswith("*") or hour.startswith("*"))

    def matches(self, wall: datetime) -> bool:
        if wall.minute not in self.minutes or wall.hour not in self.hours or wall.month not in self.months:
            return False
        dom, dow = wall.day in self.doms, wall.isoweekday() % 7 in self.dows
        return (dom or dow) if self.either_day else (dom and dow)


def reference_fires(expression: Expression, tz: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Debian cron's fires in [start, end) (whole UTC minutes), one real minute at a time."""
    fires = []
    shown = (start - MINUTE).astimezone(tz).replace(tzinfo=None)  # the latest wall time shown so far
    moment = start
    while moment < end:
        wall = moment.astimezone(tz).replace(tzinfo=None)
        if not expression.fixed_time:
            fire = expression.matches(wall)
        else:
            skipped = [shown + k * MINUTE for k in range(1, (wall - shown) // MINUTE)]
            first_time = wall > shown
            fire = (first_time and expression.matches(wall)) or any(map(expression.matches, skipped))
        if fire:
            fires.append(moment)
        shown = max(shown, wall)
        moment += MINUTE
    return fires


def offset_changes(tz: ZoneInfo, year_from: int, year_to: int) -> list[datetime]:
    """Every UTC minute at which the zone's offset differs from the minute before."""
    found = []
    day = datetime(year_from, 1, 1, tzinfo=UTC)
    while day.year <= year_to:
        if day.astimezone(tz).utcoffset() != (day + timedelta(days=1)).astimezone(tz).utcoffset():
            moment = day + MINUTE
            while moment.astimezone(tz).utcoffset() == day.astimezone(tz).utcoffset():
                moment += MINUTE
            found.append(moment)
        day += timedelta(days=1)
    return found


def fires_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    found, current = [], start - US
    while (following := next_fire_after(schedule, current)) is not None and following < end:
        assert following > current, f"next fire after {current} is {following}"
        found.append(current := following)
    return found


def first_after(fires: list[datetime], moment: datetime) -> datetime | None:
    return next((fire for fire in fires if fire > moment), None)


def assert_matches_reference(text: str, zone_name: str, change: datetime, afters: list[datetime]) -> None:
    """Ours and the reference agree on every fire within WINDOW of `change`, and on the next
    fire after each of `afters` (instants in that window that need not be fires)."""
    schedule = validate(Schedule(cron=text, timezone=zone_name))
    start, end = change - WINDOW, change + WINDOW
    expected = reference_fires(Expression(schedule.cron), ZoneInfo(zone_name), start, end)

    assert fires_between(schedule, start, end) == expected, f"{text!r} in {zone_name} around {change}"
    for after in afters:
        found, want = next_fire_after(schedule, after), first_after(expected, after)
        if want is not None:
            assert found == want, f"{text!r} in {zone_name} after {after}"
        else:  # no fire left in the window: the next one is past it, or there is none
            assert found is None or found >= end, f"{text!r} in {zone_name} after {after}"


@pytest.mark.parametrize("zone_name", ZONES)
def test_cron_fires_around_every_dst_change_of_2024_to_2026_match_debian_cron(zone_name):
    changes = offset_changes(ZoneInfo(zone_name), 2024, 2026)
    assert len(changes) >= 4, "the zone should change its offset in these years"
    for change in changes:
        # Every 11 minutes, half a minute past: before, in and after the gap or both passes.
        afters = [change - WINDOW + k * 11 * MINUTE + timedelta(seconds=30) for k in range(2 * WINDOW // (11 * MINUTE))]
        for text in EXPRESSIONS:
            assert_matches_reference(text, zone_name, change, afters)


CHANGES = [(name, change) for name in ZONES for change in offset_changes(ZoneInfo(name), 2024, 2026)]


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(text=CRON_EXPRESSIONS, zone_and_change=st.sampled_from(CHANGES), minute=st.integers(0, 239))
def test_any_cron_expression_around_a_dst_change_matches_debian_cron(text, zone_and_change, minute):
    zone_name, change = zone_and_change
    after = change - WINDOW + minute * MINUTE + timedelta(seconds=30)
    assert_matches_reference(text, zone_name, change, [after])
