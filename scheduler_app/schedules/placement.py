"""Flexible windows: a job that says "daily between 01:00 and 03:00" (or "hourly, any minute")
and lets Cronfleet place its fire where its neighbours' planned fires are fewest.

This room owns the pure part: the window parsed and normalised, its occurrences as UTC
ranges, the planned fires of other schedules counted per minute of the window (the load
profile), and the choice of the least loaded minute. No database, no clock, no Django: the
caller passes `now` and the neighbours' schedules (services/flexible.py reads them).

The choice is materialised as an ordinary cron expression in the job's zone ("37 1 * * *",
"37 * * * *"), so the beat, the DST rules and every other path see a fixed-time job.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from scheduler_app.schedules.base import InvalidSchedule, Schedule
from scheduler_app.schedules.fires import next_fire_after
from scheduler_app.schedules.zones import tzinfo_of

MINUTES_A_DAY = 24 * 60
MINUTE = timedelta(minutes=1)

# A window that crosses midnight and is longer than this is read as a typo ("03:00-01:00"
# for "01:00-03:00"), not as a 22-hour window.
MAX_OVERNIGHT_MINUTES = 12 * 60

# How many days of neighbours' fires a window is judged on: a week for a daily window (so a
# weekday-only or weekly job counts on the days it fires), a day for an hourly one (its
# neighbours repeat every day far more than every week).
DAILY_HORIZON_DAYS = 7
HOURLY_HORIZON_DAYS = 1

_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_DAILY = re.compile(r"^daily(?:\s+(\S+?)\s*-\s*(\S+))?$")


@dataclass(frozen=True)
class Window:
    """Where a flexible job may fire: `kind` "daily" (minutes `start` .. `start + length` of the
    local day, end excluded, possibly across midnight) or "hourly" (any minute of the hour)."""

    kind: str
    start: int = 0  # minute of the local day (daily) or 0 (hourly)
    length: int = 60

    @property
    def text(self) -> str:
        if self.kind == "hourly":
            return "hourly"
        end = self.start + self.length
        return f"daily {_clock(self.start)}-{'24:00' if end == MINUTES_A_DAY else _clock(end % MINUTES_A_DAY)}"

    @property
    def horizon_days(self) -> int:
        return HOURLY_HORIZON_DAYS if self.kind == "hourly" else DAILY_HORIZON_DAYS

    def minute_at(self, bucket: int) -> int:
        """The minute of the day (daily) or of the hour (hourly) of the window's `bucket`-th minute."""
        return bucket if self.kind == "hourly" else (self.start + bucket) % MINUTES_A_DAY

    def cron_at(self, bucket: int) -> str:
        """The cron expression that fires at the window's `bucket`-th minute."""
        minute = self.minute_at(bucket)
        if self.kind == "hourly":
            return f"{minute} * * * *"
        return f"{minute % 60} {minute // 60} * * *"

    def time_text(self, bucket: int) -> str:
        minute = self.minute_at(bucket)
        return f":{minute:02d} past every hour" if self.kind == "hourly" else _clock(minute)

    def bucket_of(self, local: datetime) -> int | None:
        """The minute of the window that wall time `local` falls in, or None outside it."""
        if self.kind == "hourly":
            return local.minute
        offset = (local.hour * 60 + local.minute - self.start) % MINUTES_A_DAY
        return offset if offset < self.length else None

    def occurrences(self, zone_name: str, now: datetime) -> list[tuple[datetime, datetime]]:
        """The UTC ranges [start, end) the profile is counted over: the window on each of the
        `horizon_days` local days after today (hourly: the whole of the next local day)."""
        tz = tzinfo_of(zone_name)
        today = now.astimezone(tz).date()
        ranges = []
        for day in range(1, self.horizon_days + 1):
            midnight = datetime.combine(today + timedelta(days=day), time(0))
            if self.kind == "hourly":
                begin, end = midnight, midnight + timedelta(days=1)
            else:
                begin = midnight + timedelta(minutes=self.start)
                end = begin + timedelta(minutes=self.length)
            # Wall times to instants: one in a spring-forward gap lands just after it.
            ranges.append((begin.replace(tzinfo=tz).astimezone(UTC), end.replace(tzinfo=tz).astimezone(UTC)))
        return ranges


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _minute_of(field: str, text: str, *, end: bool) -> int:
    match = _TIME.match(text)
    hour, minute = (int(match.group(1)), int(match.group(2))) if match else (-1, -1)
    if (hour, minute) == (24, 0) and end:
        return MINUTES_A_DAY
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise InvalidSchedule(
            field, f"{text!r} is not a time of day (HH:MM, 00:00 to 23:59{', or 24:00' if end else ''})"
        )
    return hour * 60 + minute


def parse_window(text, field: str = "flex_window") -> Window:
    """A window from its text: "hourly", "daily" (any minute of the day) or "daily HH:MM-HH:MM"
    (end excluded; an end before the start crosses midnight). Raise InvalidSchedule(field)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchedule(field, "must be 'hourly', 'daily' or 'daily HH:MM-HH:MM'")
    words = " ".join(text.split()).lower()
    if words == "hourly":
        return Window(kind="hourly")
    match = _DAILY.match(words)
    if match is None:
        raise InvalidSchedule(
            field,
            f"{text.strip()!r} is not a window: write 'hourly', 'daily' or "
            "'daily HH:MM-HH:MM' (e.g. 'daily 01:00-03:00')",
        )
    if match.group(1) is None:
        return Window(kind="daily", start=0, length=MINUTES_A_DAY)
    start = _minute_of(field, match.group(1), end=False)
    end = _minute_of(field, match.group(2), end=True)
    if end == start:
        raise InvalidSchedule(field, f"{text.strip()!r} is empty: it ends when it starts")
    if end > start:
        return Window(kind="daily", start=start, length=end - start)
    length = end + MINUTES_A_DAY - start
    if length > MAX_OVERNIGHT_MINUTES:
        raise InvalidSchedule(
            field,
            f"ends at {_clock(end)}, before it starts at {_clock(start)}: a window across "
            f"midnight (such as 23:00-01:00) may last at most {MAX_OVERNIGHT_MINUTES // 60} "
            f"hours; did you mean {_clock(end)}-{_clock(start)}?",
        )
    return Window(kind="daily", start=start, length=length)


@functools.lru_cache(maxsize=2048)
def fires_between(cron: str, zone_name: str, start: datetime, end: datetime) -> tuple[datetime, ...]:
    """The fires of `cron` in `zone_name` in [start, end), with the usual DST rules.

    Cached: the same neighbours are counted again for every job placed in the same window
    on the same day, and the answer is a pure function of the arguments.
    """
    schedule, fires = Schedule(cron=cron, timezone=zone_name), []
    cursor = next_fire_after(schedule, start - timedelta(microseconds=1))
    while cursor is not None and cursor < end:
        fires.append(cursor)
        cursor = next_fire_after(schedule, cursor)
    return tuple(fires)


@dataclass(frozen=True)
class Neighbours:
    """The planned fires a window is judged against, as groups of jobs sharing a schedule:
    crons (cron, zone, jitter seconds, how many), intervals (seconds, first fire, how many)
    and one-off instants (instant, how many)."""

    crons: Sequence[tuple[str, str, int, int]] = ()
    intervals: Sequence[tuple[int, datetime, int]] = ()
    once: Sequence[tuple[datetime, int]] = ()


def load_profile(window: Window, zone_name: str, now: datetime, neighbours: Neighbours) -> list[float]:
    """Planned fires per minute of the window, summed over its occurrences (Window.occurrences).

    A cron job with jitter counts as its expected share in each minute its fire may move to
    (jitter spreads it evenly), so a thousand jittered jobs read as the flat load they are.
    """
    profile = [0.0] * window.length
    tz = tzinfo_of(zone_name)
    ranges = window.occurrences(zone_name, now)

    def add(instant: datetime, weight: float, begin: datetime, end: datetime) -> None:
        if begin <= instant < end and (bucket := window.bucket_of(instant.astimezone(tz))) is not None:
            profile[bucket] += weight

    for begin, end in ranges:
        for cron, zone, jitter, count in neighbours.crons:
            spread = _jitter_shares(jitter)
            for fire in fires_between(cron, zone, begin - timedelta(seconds=jitter), end):
                for step, share in spread:
                    add(fire + step * MINUTE, count * share, begin, end)
        for every, first, count in neighbours.intervals:
            for fire in _interval_fires(every, first, begin, end):
                add(fire, count, begin, end)
        for instant, count in neighbours.once:
            add(instant, count, begin, end)
    return profile


def _jitter_shares(jitter: int) -> list[tuple[int, float]]:
    """(minutes after the nominal fire, share of the fire) for a fire moved by 0..jitter-1 s."""
    if jitter <= 0:
        return [(0, 1.0)]
    return [(step, (min(60 * (step + 1), jitter) - 60 * step) / jitter) for step in range(math.ceil(jitter / 60))]


def _interval_fires(every: int, first: datetime, begin: datetime, end: datetime) -> Iterable[datetime]:
    step = timedelta(seconds=every)
    k = max(0, math.ceil((begin - first) / step))
    fire = first + k * step
    while fire < end:
        yield fire
        fire += step


def choose_minute(profile: Sequence[float], key: str) -> int:
    """The least loaded minute of `profile`; ties go to the first such minute at or after a
    point drawn from `key` (the job's tenant and name), going round.

    The same profile and key give the same minute. A window filled one job at a time stays
    flat: every minute takes a job before any takes its second, and jobs whose keys differ
    start their search at different minutes.
    """
    size = len(profile)
    origin = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % size
    # Rounded so that sums of jitter shares that differ only in float noise tie.
    return min(range(size), key=lambda i: (round(profile[i], 6), (i - origin) % size))


def load_text(value: float) -> str:
    """A count of planned fires as people read it: whole when whole, else to one decimal."""
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"
