"""Time-data impact: what the zoneinfo and holiday data installed now say about the fires a
job already holds (its next_run_at and its recorded, not yet started fires), as changes:
a held fire that moved or vanished, a fire that appeared before the held next one. Pure: the
schedule comes with its calendar's dates already built; `now` is an argument.

Why only held fires: a job keeps one UTC instant (next_run_at), computed with the data of its
day; every later fire is computed at dispatch with the data installed then. So what a zone's
new rules or a new holiday can get wrong is that instant (and runs recorded but not started):
the beat would fire at the old instant, and the new fire would be missed or come on top.

Under a calendar's `skip` policy the held fire stays in the job's sequence whatever the
calendar says (the beat reads the calendar at the fire and records a skipped run with the
reason), so a new holiday changes nothing held there: it is not reported.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from cronsim import CronSim, CronSimError

from scheduler_app.schedules.base import MICROSECOND, Schedule
from scheduler_app.schedules.calendars import CalendarPolicy, local_day
from scheduler_app.schedules.fires import last_fire_at_or_before, next_fire_after
from scheduler_app.schedules.zones import tzinfo_of

# A held fire and a fire of the new data this close are one fire moved; farther, the held one
# vanished (and the other, if before the held next fire, appeared). A zone's offset moves by
# at most a day (Pacific/Apia skipped 2011-12-30), a calendar moves a fire over a long weekend.
PAIR_LIMIT = timedelta(hours=26)

# Fires listed as appeared before one held next fire; more are counted, not listed.
MAX_APPEARED = 5


class ChangeKind(enum.StrEnum):
    MOVED = "moved"  # a held fire is not one any more; the fire nearest it is `new`
    APPEARED = "appeared"  # a fire before the held next one that the job does not hold
    VANISHED = "vanished"  # a held fire is not one any more, and none is near it


class Cause(enum.StrEnum):
    ZONE = "zone"
    CALENDAR = "calendar"


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    old: datetime | None  # the held fire (None for an appeared one)
    new: datetime | None  # the fire of the new data (None for a vanished one)
    cause: Cause
    source: str  # the zone's name, or the calendar's
    detail: str  # why, in words: the offset now, or the day that is (not) a business day
    held: str = "next_run_at"  # "next_run_at", or "ledger" for a recorded run not yet started
    more: int = 0  # appeared: fires beyond MAX_APPEARED, counted

    def fingerprint(self, job_id: int) -> str:
        """Stable across beats and runs: the same change of the same job has the same one."""
        text = "|".join([str(job_id), self.kind, _iso(self.old), _iso(self.new), self.cause, self.source, self.held])
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _iso(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).isoformat()


def is_fire(schedule: Schedule, at: datetime) -> bool:
    """Whether `at` is a fire of the schedule as the data installed now computes it."""
    return next_fire_after(schedule, at - MICROSECOND) == at


def compare(
    schedule: Schedule,
    *,
    next_run_at: datetime | None,
    recorded: Sequence[datetime] = (),
    now: datetime,
    horizon: timedelta,
) -> list[Change]:
    """The changes to the fires the job holds: `next_run_at` and `recorded` (the scheduled
    times of its runs recorded but not started), against the fires the schedule has now.

    Held fires after now + horizon are not looked at (a later check will); a next_run_at at
    or before now (due, not yet claimed) and each recorded fire are only checked to still be
    fires. Fires that appeared are looked for between now and the held next fire.
    """
    until = now + horizon
    changes = [change for at in recorded if at <= until for change in _check_held(schedule, at, now, "ledger")]
    if next_run_at is None or next_run_at > until:
        first = next_fire_after(schedule, now)
        if first is not None and first <= until and (next_run_at is None or first < next_run_at):
            changes += _appeared(schedule, first, min(until, next_run_at or until), skip=None)
        return changes
    if next_run_at <= now:
        return changes + _check_held(schedule, next_run_at, now, "next_run_at")
    moved = _check_held(schedule, next_run_at, now, "next_run_at")
    paired = moved[0].new if moved else None
    first = next_fire_after(schedule, now)
    if first is not None and first < next_run_at:
        changes += _appeared(schedule, first, next_run_at, skip=paired)
    return changes + moved


def _check_held(schedule: Schedule, at: datetime, now: datetime, held: str) -> list[Change]:
    if is_fire(schedule, at):
        return []
    near = _nearest_fire(schedule, at, now=now)
    cause, source, detail = _why(schedule, at, near)
    kind = ChangeKind.MOVED if near is not None else ChangeKind.VANISHED
    return [Change(kind, at, near, cause, source, detail, held=held)]


def _nearest_fire(schedule: Schedule, at: datetime, *, now: datetime) -> datetime | None:
    """The fire nearest `at` within PAIR_LIMIT, the earlier on a tie. A past one only when it
    is a zone's shift of the held fire (less than a day away, at another wall time): a held
    fire the new data puts an hour earlier, with that hour begun, is still that fire (late),
    while yesterday's fire at the same wall time has run already."""
    candidates = [next_fire_after(schedule, at), last_fire_at_or_before(schedule, at)]
    near = [
        fire
        for fire in candidates
        if fire is not None and abs(fire - at) <= PAIR_LIMIT and (fire >= now or _shifted(schedule, at, fire))
    ]
    return min(near, key=lambda fire: (abs(fire - at), fire), default=None)


def _shifted(schedule: Schedule, held: datetime, fire: datetime) -> bool:
    tz = tzinfo_of(schedule.timezone)
    return abs(fire - held) < timedelta(days=1) and held.astimezone(tz).time() != fire.astimezone(tz).time()


def _appeared(schedule: Schedule, first: datetime, before: datetime, *, skip: datetime | None) -> list[Change]:
    fires: list[datetime] = []
    more = 0
    at_or_none: datetime | None = first
    while at_or_none is not None and at_or_none < before:
        at = at_or_none
        if at != skip:
            if len(fires) < MAX_APPEARED:
                fires.append(at)
            else:
                more += 1
                if more >= 10 * MAX_APPEARED:  # a fine schedule far off: enough to say so
                    break
        at_or_none = next_fire_after(schedule, at)
    changes = []
    for index, fire in enumerate(fires):
        cause, source, detail = _why(schedule, None, fire)
        extra = more if index == len(fires) - 1 else 0
        changes.append(Change(ChangeKind.APPEARED, None, fire, cause, source, detail, more=extra))
    return changes


def _why(schedule: Schedule, old: datetime | None, new: datetime | None) -> tuple[Cause, str, str]:
    """Which data made the change, its name and what it says now. A job without a moving
    calendar can only have been moved by its zone. With one, the zone is blamed when the held
    fire's wall time in the zone now is not one the expression names; else the calendar."""
    calendar = schedule.calendar
    moving = calendar is not None and schedule.calendar_policy != CalendarPolicy.SKIP
    if not moving or (old is not None and not _wall_time_fits(schedule, old)):
        return Cause.ZONE, schedule.timezone, _zone_detail(schedule.timezone, old, new)
    if old is not None and not calendar.is_business_day(day := local_day(schedule.timezone, old)):
        return Cause.CALENDAR, calendar.name, f"{day.isoformat()} is not a business day ({calendar.why_not(day)})"
    at = new if new is not None else old
    assert at is not None  # a change has a held fire, a new one or both
    day = local_day(schedule.timezone, at)
    status = "a business day" if calendar.is_business_day(day) else f"not a business day ({calendar.why_not(day)})"
    return Cause.CALENDAR, calendar.name, f"{day.isoformat()} is {status}"


def _wall_time_fits(schedule: Schedule, at: datetime) -> bool:
    """Whether `at`'s wall time in the zone now is a time of day the cron names (any day)."""
    if not schedule.cron:
        return True  # intervals count real seconds: a zone moves none of their fires
    minute, hour = schedule.cron.split()[:2]
    try:
        daily = replace(schedule, cron=f"{minute} {hour} * * *", calendar=None, jitter=0)
        wall = at.astimezone(tzinfo_of(schedule.timezone)).replace(tzinfo=None, second=0, microsecond=0)
        return next(CronSim(daily.cron, wall - timedelta(minutes=1)), None) == wall
    except (CronSimError, ValueError):
        return False


def _zone_detail(zone_name: str, old: datetime | None, new: datetime | None) -> str:
    tz = tzinfo_of(zone_name)
    at = new if new is not None else old
    assert at is not None
    local = at.astimezone(tz)
    text = f"{local:%Y-%m-%d %H:%M} local is UTC{_offset_text(local.utcoffset())} now"
    if old is not None and new is not None:
        # The held fire had the same wall time (the expression's): its offset was wall - old.
        was = local.replace(tzinfo=None) - old.astimezone(UTC).replace(tzinfo=None)
        if was != local.utcoffset() and abs(was) <= PAIR_LIMIT:
            text += f", was UTC{_offset_text(was)} when the held fire was computed"
    elif old is not None:
        text = f"{old.astimezone(tz):%Y-%m-%d %H:%M} local (UTC{_offset_text(old.astimezone(tz).utcoffset())}) is no fire now"
    return text


def _offset_text(offset: timedelta | None) -> str:
    seconds = int((offset or timedelta(0)).total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}"
