"""Maintenance windows as time: when one is open and when it ends. No database, no clock.

A window is one-off (from `starts_at` to `ends_at`) or recurring: it opens at each fire of a
cron expression read in its IANA zone (the job schedules' DST rules, fires.py) and stays open
for `duration` of elapsed time. Intervals are half-open: a window is open at its start and
closed at its end, so a fire at the very end is outside it. Recurring openings that overlap
(a duration longer than the gap between two starts) merge into one interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from scheduler_app.schedules.base import Schedule
from scheduler_app.schedules.fires import next_fire_after

MAX_MERGED = 1000  # overlapping openings followed before an interval's end is taken as found


@dataclass(frozen=True)
class WindowTimes:
    """The times of a window: `cron` and `duration`, or `starts_at` and `ends_at` (UTC)."""

    zone: str = "UTC"
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    cron: str = ""
    duration: timedelta = timedelta(0)

    @property
    def recurring(self) -> bool:
        return bool(self.cron)

    def describe(self) -> str:
        if self.recurring:
            minutes = int(self.duration.total_seconds() // 60)
            return f"cron {self.cron} ({self.zone}) for {minutes} min"
        # A one-off window has both: services.windows.check_window_fields, every write's check.
        return f"{self.starts_at.isoformat()} to {self.ends_at.isoformat()}"  # type: ignore[union-attr]


def _starts(times: WindowTimes) -> Schedule:
    return Schedule(cron=times.cron, timezone=times.zone)


@lru_cache(maxsize=4096)
def open_at(times: WindowTimes, at: datetime) -> tuple[datetime, datetime] | None:
    """The (start, end) of the window's interval holding the instant `at`, or None when the
    window is closed then."""
    if not times.recurring:
        if times.starts_at is not None and times.ends_at is not None and times.starts_at <= at < times.ends_at:
            return times.starts_at, times.ends_at
        return None
    if times.duration <= timedelta(0):
        return None
    start = next_fire_after(_starts(times), at - times.duration)  # the first opening still open at `at`
    if start is None or start > at:
        return None
    return start, _merged_end(times, start)


def _merged_end(times: WindowTimes, start: datetime) -> datetime:
    end = start + times.duration
    following = next_fire_after(_starts(times), start)
    for _ in range(MAX_MERGED):
        if following is None or following >= end:
            break
        end = max(end, following + times.duration)
        following = next_fire_after(_starts(times), following)
    return end


def next_opening(times: WindowTimes, after: datetime) -> tuple[datetime, datetime] | None:
    """The interval open at `after`, else the next one to open after it; None when none will."""
    current = open_at(times, after)
    if current is not None:
        return current
    if not times.recurring:
        if times.starts_at is not None and times.ends_at is not None and times.starts_at > after:
            return times.starts_at, times.ends_at
        return None
    if times.duration <= timedelta(0):
        return None
    start = next_fire_after(_starts(times), after)
    return (start, _merged_end(times, start)) if start is not None else None
