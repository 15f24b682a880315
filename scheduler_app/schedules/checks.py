"""A schedule validated as a whole (every field named in the error), and the shortest gap
between its fires (for tenants' minimum intervals and jitter)."""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler_app.schedules.base import (
    DAY,
    LATEST_INSTANT,
    MAX_EVERY_SECONDS,
    MAX_JITTER_SECONDS,
    PROBE_FROM,
    InvalidSchedule,
    Schedule,
    normalize_cron,
)
from scheduler_app.schedules.fires import next_fire_after, preview
from scheduler_app.schedules.zones import first_offset_change, zone


def _aware(field_name: str, value: datetime | None) -> None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise InvalidSchedule(field_name, "must include a UTC offset or time zone")


def validate(schedule: Schedule) -> Schedule:
    """Check `schedule` and return it with its cron expression normalised.

    Raises InvalidSchedule naming the field at fault.
    """
    kinds = [bool(schedule.cron), schedule.every is not None, schedule.at is not None]
    if sum(kinds) != 1:
        raise InvalidSchedule("schedule", "give exactly one of cron, every or at")
    for name in ("at", "anchor", "start_at", "end_at"):
        _aware(name, getattr(schedule, name))
    zone(schedule.timezone)
    cron = schedule.cron
    if cron:
        cron = normalize_cron(cron)
    if schedule.every is not None:
        every = schedule.every
        if isinstance(every, bool) or not isinstance(every, int):
            raise InvalidSchedule("every", "must be a whole number of seconds")
        if not 1 <= every <= MAX_EVERY_SECONDS:
            raise InvalidSchedule("every", f"must be between 1 and {MAX_EVERY_SECONDS} seconds")
        if schedule.anchor is None and schedule.start_at is None:
            raise InvalidSchedule("anchor", "an interval needs an anchor or a start time")
    for name in ("at", "start_at", "end_at"):
        value = getattr(schedule, name)
        if value is not None and value >= LATEST_INSTANT:
            raise InvalidSchedule(name, f"must be before {LATEST_INSTANT.year}")
    if schedule.start_at and schedule.end_at and schedule.end_at < schedule.start_at:
        raise InvalidSchedule("end_at", "must not be before start_at")
    jitter = schedule.jitter
    if isinstance(jitter, bool) or not isinstance(jitter, int) or not 0 <= jitter <= MAX_JITTER_SECONDS:
        raise InvalidSchedule("jitter", f"must be a whole number of seconds from 0 to {MAX_JITTER_SECONDS}")
    if jitter and schedule.at is not None:
        raise InvalidSchedule("jitter", "applies to repeating schedules (cron or every), not to a one-off")
    normalised = Schedule(
        cron=cron,
        timezone=schedule.timezone,
        every=schedule.every,
        at=schedule.at,
        anchor=schedule.anchor,
        start_at=schedule.start_at,
        end_at=schedule.end_at,
        jitter=jitter,
        jitter_seed=schedule.jitter_seed,
    )
    if normalised.cron and next_fire_after(normalised, normalised.start_at or PROBE_FROM) is None:
        if normalised.end_at is None:
            raise InvalidSchedule("cron", f"{cron!r} never fires")
    if jitter:
        _check_jitter(normalised)
    return normalised


def _check_jitter(schedule: Schedule) -> None:
    """Refuse a jitter longer than the shortest gap between two fires, DST changes included."""
    nominal, probe = schedule.nominal, schedule.start_at or PROBE_FROM
    gap, where = shortest_gap(nominal, probe), ""
    if gap is not None and (near_change := shortest_gap_at_offset_changes(nominal, probe, under=gap)) is not None:
        gap, where = near_change, " next to a DST change"
    if gap is not None and schedule.jitter > gap:
        raise InvalidSchedule(
            "jitter",
            f"must not exceed the shortest gap between two fires ({gap:g} s{where}), "
            "or fires would overtake each other",
        )


# How many upcoming fires of a cron schedule are looked at to find its shortest gap.
GAP_PROBE_FIRES = 200


def shortest_gap(schedule: Schedule, after: datetime) -> float | None:
    """The shortest time in seconds between two fires: exact for an interval; for cron the
    least gap among the next GAP_PROBE_FIRES fires (a cron pattern repeats within a day at
    minute resolution; day and month restrictions only lengthen gaps). None for a one-off."""
    if schedule.every is not None:
        return float(schedule.every)
    if not schedule.cron:
        return None
    fires = preview(schedule, after, GAP_PROBE_FIRES)
    return min(((b - a).total_seconds() for a, b in zip(fires, fires[1:])), default=None)


# How many years of a zone's offset changes shortest_gap_at_offset_changes looks at. Zones
# change their rules (Casablanca has had DST only since 2008; Sydney moved its dates that
# year), so one year from the probe's start (2000) is not enough; forty reach well past today
# and into the rule that repeats every year after tzdata's last listed change.
GAP_CHECK_YEARS = 40


def shortest_gap_at_offset_changes(schedule: Schedule, after: datetime, *, under: float) -> float | None:
    """The shortest time in seconds, if under `under`, between two cron fires next to a
    change of the zone's UTC offset in the GAP_CHECK_YEARS years from `after`; else None.

    A change can bring fires closer than the expression's pattern does: "30 2,3 * * *" in
    Australia/Sydney fires at 03:00 (02:30 does not exist) and 03:30 on the spring-forward
    day, 30 minutes apart instead of 60. Two fires closer than `under` with the change
    between them or the first at it both lie within `under` of the change, so only those
    fires are looked at.
    """
    if not schedule.cron:
        return None
    window = timedelta(seconds=under)
    until = min(after + GAP_CHECK_YEARS * 365 * DAY, schedule.end_at or LATEST_INSTANT, LATEST_INSTANT)
    gaps = []
    change = first_offset_change(schedule.timezone, after, until)
    while change is not None:
        fires, cursor = [], next_fire_after(schedule, change - window)
        while cursor is not None and cursor < change + window:
            fires.append(cursor)
            cursor = next_fire_after(schedule, cursor)
        gaps += [(b - a).total_seconds() for a, b in zip(fires, fires[1:])]
        change = first_offset_change(schedule.timezone, change, until)
    return min((gap for gap in gaps if gap < under), default=None)
