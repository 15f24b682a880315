"""Business-day calendars: which local dates are business days, and where a job's fire goes
under its calendar policy. Pure: the holiday dates come in already built (the holidays
package is read on a higher floor, models/calendars.py).

A fire's day is its local date in the job's zone. Under `skip` a fire on a non-business
day stays in the job's sequence and the beat records it as skipped (plan_fires), so the
ledger says why it did not run. Under `next_business_day` / `previous_business_day` it
moves to the same wall time on the nearest business day after / before; fires that land
on one instant (a Saturday and a Sunday fire moved to Monday 09:00, where Monday's own
fire already is) coalesce into one. Moving earlier is why the beat works on the moved
sequence: the fire after Thursday's is Friday's moved Saturday fire, so next_run_at is
already the Friday time when Thursday's fire is planned.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from scheduler_app.schedules.base import MICROSECOND
from scheduler_app.schedules.zones import first_offset_change, tzinfo_of

# How far a business day is looked for from a date. A calendar has at least one business
# weekday (checked when it is saved), so only a long run of holidays reaches this.
SEARCH_DAYS = 366

# Business days walked while looking for a moved fire; each step jumps to the day that holds
# the plain schedule's next fire, so this bounds only pathological calendars.
MAX_OWNERS = 1000

WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

DAY = timedelta(days=1)


class CalendarPolicy(enum.StrEnum):
    SKIP = "skip"  # the fire does not run; the beat records it as skipped with the reason
    NEXT_BUSINESS_DAY = "next_business_day"  # same wall time, the next business day
    PREVIOUS_BUSINESS_DAY = "previous_business_day"  # same wall time, the business day before


@dataclass(frozen=True)
class BusinessCalendar:
    """A tenant's named calendar as dates: business weekdays (0 Monday .. 6 Sunday),
    non-business dates (holidays, from the country's and the hand-added ones) and extra
    business dates (which win over both). `names` says what a holiday is called."""

    name: str
    weekdays: frozenset[int] = frozenset(range(5))
    holidays: frozenset[date] = frozenset()
    business_days: frozenset[date] = frozenset()
    names: Mapping[date, str] = field(default_factory=dict, compare=False, hash=False)

    def is_business_day(self, day: date) -> bool:
        if day in self.business_days:
            return True
        return day.weekday() in self.weekdays and day not in self.holidays

    def next_business_day(self, day: date) -> date | None:
        """The first business day strictly after `day`, or None within SEARCH_DAYS."""
        for n in range(1, SEARCH_DAYS + 1):
            if self.is_business_day(candidate := day + n * DAY):
                return candidate
        return None

    def previous_business_day(self, day: date) -> date | None:
        """The last business day strictly before `day`, or None within SEARCH_DAYS."""
        for n in range(1, SEARCH_DAYS + 1):
            if self.is_business_day(candidate := day - n * DAY):
                return candidate
        return None

    def why_not(self, day: date) -> str:
        """What makes `day` a non-business day: the holiday's name, else its weekday."""
        if day in self.names:
            return self.names[day]
        if day in self.holidays:
            return "holiday"
        return WEEKDAY_NAMES[day.weekday()]

    def reason(self, day: date) -> str:
        """The skipped run's reason for a fire on `day`."""
        return f"calendar: {day.isoformat()} is not a business day in {self.name} ({self.why_not(day)})"


def local_day(zone_name: str, at: datetime) -> date:
    return at.astimezone(tzinfo_of(zone_name)).date()


def skip_reason(calendar: BusinessCalendar, zone_name: str, fire: datetime) -> str | None:
    """The reason a `skip` job does not run `fire`, or None on a business day."""
    day = local_day(zone_name, fire)
    return None if calendar.is_business_day(day) else calendar.reason(day)


def at_wall_time(day: date, wall: time, zone_name: str) -> datetime:
    """`wall` on `day` in the zone, as UTC. A wall time in a repeated hour is its first pass;
    one skipped by a spring-forward gap is the end of the gap (as cron fires it)."""
    tz = tzinfo_of(zone_name)
    local = datetime.combine(day, wall.replace(fold=0), tzinfo=tz)
    at = local.astimezone(UTC)
    if at.astimezone(tz).replace(tzinfo=None) != local.replace(tzinfo=None):
        other = local.replace(fold=1).astimezone(UTC)
        return first_offset_change(zone_name, min(at, other), max(at, other)) or at
    return at


def shift_fire(calendar: BusinessCalendar, policy: str, zone_name: str, fire: datetime) -> datetime | None:
    """Where `fire` runs under `policy`: itself on a business day; else None under skip,
    or the same wall time on the next / previous business day (None if there is none)."""
    local = fire.astimezone(tzinfo_of(zone_name))
    day = local.date()
    if calendar.is_business_day(day):
        return fire
    if policy == CalendarPolicy.SKIP:
        return None
    target = (
        calendar.next_business_day(day)
        if policy == CalendarPolicy.NEXT_BUSINESS_DAY
        else calendar.previous_business_day(day)
    )
    return None if target is None else at_wall_time(target, local.time(), zone_name)


def _domain(calendar: BusinessCalendar, policy: str, owner: date) -> tuple[date, date]:
    """The days (first, last) whose fires move to business day `owner`: the non-business
    days just before it (next_business_day) or just after it (previous_business_day)."""
    if policy == CalendarPolicy.NEXT_BUSINESS_DAY:
        before = calendar.previous_business_day(owner)
        return (before + DAY if before else owner), owner
    after = calendar.next_business_day(owner)
    return owner, (after - DAY if after else owner)


def _owner(calendar: BusinessCalendar, policy: str, day: date) -> date | None:
    """The business day the fires of `day` move to."""
    if calendar.is_business_day(day):
        return day
    if policy == CalendarPolicy.NEXT_BUSINESS_DAY:
        return calendar.next_business_day(day)
    return calendar.previous_business_day(day)


def _day_start(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


def shifted_next_after(
    calendar: BusinessCalendar,
    policy: str,
    zone_name: str,
    step: Callable[[datetime], datetime | None],
    after: datetime,
) -> datetime | None:
    """The first moved fire strictly after `after` (next/previous_business_day), where
    `step(t)` is the plain schedule's first fire after t.

    Moved fires are not in the order of the plain ones (under previous_business_day a
    Saturday fire runs before Friday's later ones), so the search goes by business day: the
    first business day from `after`'s date on whose moved fires (its own and those of the
    non-business days that move to it) one lies after `after`.
    """
    tz = tzinfo_of(zone_name)
    after_day = after.astimezone(tz).date()
    owner = after_day if calendar.is_business_day(after_day) else calendar.next_business_day(after_day)
    for _ in range(MAX_OWNERS):
        if owner is None:
            return None
        first, last = _domain(calendar, policy, owner)
        probe = step(_day_start(first, tz) - MICROSECOND)
        if probe is None:
            return None
        probe_day = probe.astimezone(tz).date()
        if probe_day > last:  # nothing fires in this owner's days: jump to the next fire's
            owner = _owner(calendar, policy, probe_day)
            continue
        found = _earliest_moved(first, last, owner, after, zone_name, step)
        if found is not None:
            return found
        owner = calendar.next_business_day(owner)
    return None


def _earliest_moved(
    first: date, last: date, owner: date, after: datetime, zone_name: str, step: Callable[[datetime], datetime | None]
) -> datetime | None:
    tz = tzinfo_of(zone_name)
    after_local = after.astimezone(tz)
    best: datetime | None = None
    day = first
    while day <= last:
        cursor = _day_start(day, tz) - MICROSECOND
        if owner == after_local.date():
            # Only fires whose wall time is past `after`'s can land after it; start a little
            # before that wall time (offsets differ between the two days by at most hours).
            cursor = max(cursor, at_wall_time(day, after_local.time(), zone_name) - timedelta(hours=3))
        while (fire := step(cursor)) is not None and fire.astimezone(tz).date() == day:
            moved = fire if day == owner else at_wall_time(owner, fire.astimezone(tz).time(), zone_name)
            if moved > after:
                best = moved if best is None else min(best, moved)
                break
            cursor = fire
        day += DAY
    return best


def moved_from(
    calendar: BusinessCalendar, policy: str, zone_name: str, step: Callable[[datetime], datetime | None], fire: datetime
) -> list[date]:
    """The non-business days whose fires moved to `fire` (for previews): each day of the
    business day's domain with a plain fire at the same wall time."""
    tz = tzinfo_of(zone_name)
    local = fire.astimezone(tz)
    owner = local.date()
    if policy == CalendarPolicy.SKIP or not calendar.is_business_day(owner):
        return []
    first, last = _domain(calendar, policy, owner)
    days = []
    day = first
    while day <= last:
        if day != owner:
            at = at_wall_time(day, local.time(), zone_name)
            if step(at - MICROSECOND) == at:
                days.append(day)
        day += DAY
    return days
