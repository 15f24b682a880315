"""The fires of a schedule: the next after and the last at or before an instant (cron with
Debian cron's DST rules, intervals, one-offs, bounds, jitter), previews and DST flags."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cronsim import CronSim

from scheduler_app.schedules.base import LATEST_INSTANT, MICROSECOND, SECOND, Schedule
from scheduler_app.schedules.calendars import CalendarPolicy, at_wall_time, moved_from, shifted_next_after, skip_reason
from scheduler_app.schedules.zones import end_of_second_pass, first_offset_change, tzinfo_of

# How far last_fire_at_or_before looks back, widening until a window holds a fire; each
# window is at most ~60 times the last, so stepping forward through it stays cheap.
_LOOKBACKS = [timedelta(seconds=s) for s in (120, 7200, 2 * 86400, 32 * 86400, 367 * 86400, 29 * 366 * 86400)]


def jitter_offset(schedule: Schedule, nominal: datetime) -> timedelta:
    """The stable delay of the fire due at `nominal`: whole seconds in [0, jitter)."""
    if not schedule.jitter:
        return timedelta(0)
    key = f"{schedule.jitter_seed}:{nominal.astimezone(UTC).isoformat()}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    return timedelta(seconds=draw % schedule.jitter)


def _interval_anchor(schedule: Schedule) -> datetime:
    anchor = schedule.start_at or schedule.anchor
    assert anchor is not None
    return anchor.astimezone(UTC).replace(microsecond=0)


def _next_fixed_time_fire(cron: str, zone_name: str, after: datetime) -> datetime | None:
    """The first fire strictly after `after` of a fixed-time job (see _is_fixed_time).

    cronsim walks the job's wall clock, so "0 9 * * *" means 09:00 local on both sides of a
    DST change; a wall time skipped by a gap fires right after it, and one in a repeated
    hour fires in its first pass only.
    """
    local = after.astimezone(tzinfo_of(zone_name))
    if local.fold and local.replace(fold=0).utcoffset() != local.utcoffset():
        # `after` is in the second pass of a repeated hour. cronsim reads every wall time of
        # that hour as its first pass, which is behind us (the job fired there once), so it
        # would answer with up to 60 past fires per hour of overlap. Look from the end of the
        # repeated hour instead: one step past all of it, however many fires it holds.
        local = end_of_second_pass(zone_name, after) - SECOND
    found = next(CronSim(cron, local), None)
    return None if found is None else found.astimezone(UTC)


def _next_wildcard_fire(cron: str, zone_name: str, after: datetime) -> datetime | None:
    """The first fire strictly after `after` of a job that is not fixed-time (hourly or finer).

    Such a job fires at every real instant whose wall time matches (Debian cron). Between
    two changes of the zone's UTC offset the wall clock is UTC plus a constant, so each such
    stretch is searched as plain wall time, moving on to the next stretch when the answer
    lies past its end. (cronsim's own stepping in the zone measures its jumps on the wall
    clock but makes them in UTC, and misses fires where the offset changes by 30 or 45
    minutes: Australia/Lord_Howe, Pacific/Chatham.)
    """
    cursor = after
    while True:
        offset = (cursor + MICROSECOND).astimezone(tzinfo_of(zone_name)).utcoffset()
        assert offset is not None  # an aware time in a ZoneInfo
        wall = next(CronSim(cron, (cursor + offset).replace(tzinfo=None)), None)
        if wall is None:
            return None
        found = (wall - offset).replace(tzinfo=UTC)
        change = first_offset_change(zone_name, cursor + MICROSECOND, found)
        if change is None:
            return found
        # Each turn starts at a later offset change, so the loop ends at the first fire
        # (or when cronsim finds none within 50 years of its start).
        cursor = change - MICROSECOND


def _is_fixed_time(cron: str) -> bool:
    """Whether Debian cron treats the job as fixed-time: no `*` starts its minute or hour field."""
    minute, hour = cron.split()[:2]
    return not (minute.startswith("*") or hour.startswith("*"))


def _raw_next_after(schedule: Schedule, after: datetime) -> datetime | None:
    """The first fire strictly after `after`, ignoring the start/end window."""
    if schedule.cron:
        try:
            if _is_fixed_time(schedule.cron):
                return _next_fixed_time_fire(schedule.cron, schedule.timezone, after)
            return _next_wildcard_fire(schedule.cron, schedule.timezone, after)
        except (OverflowError, ValueError):
            return None
    if schedule.every is not None:
        anchor = _interval_anchor(schedule)
        if after < anchor:
            return anchor
        every = timedelta(seconds=schedule.every)
        return anchor + ((after - anchor) // every + 1) * every
    if schedule.at is None:  # no schedule of its own (a chained job): no fires
        return None
    return schedule.at.astimezone(UTC) if schedule.at > after else None


def _raw_last_at_or_before(schedule: Schedule, at: datetime) -> datetime | None:
    """The latest fire at or before `at`, ignoring the start/end window."""
    if schedule.cron:
        # Not cronsim's reverse iteration: it misses fires in repeated or shortened DST hours
        # and can loop forever in some zones (Pacific/Chatham). Step forward through widening
        # windows instead, with the same rules next_fire_after uses.
        return _last_stepping_forward(_raw_next_after, schedule, at)
    if schedule.every is not None:
        anchor = _interval_anchor(schedule)
        if at < anchor:
            return None
        every = timedelta(seconds=schedule.every)
        return anchor + ((at - anchor) // every) * every
    if schedule.at is None:  # no schedule of its own (a chained job): no fires
        return None
    return schedule.at.astimezone(UTC) if schedule.at <= at else None


def next_fire_after(schedule: Schedule, after: datetime) -> datetime | None:
    """Return the first fire time strictly after `after`, or None when nothing is left.

    With jitter, fires are nominal times plus their offsets. Offsets are shorter than the
    gap between fires (validate), so fires keep their order: the first nominal time whose
    jittered fire is past `after` gives the answer, and it lies after `after` - jitter.

    With a calendar whose policy moves fires, the moved sequence (schedules/calendars.py);
    under `skip` the plain one: the beat records its non-business fires as skipped.
    """
    if schedule.calendar is not None and schedule.calendar_policy != CalendarPolicy.SKIP:
        return _moved_next_after(schedule, after)
    if not schedule.jitter:
        return _next_nominal_after(schedule, after)
    nominal = schedule.nominal
    cursor = after - timedelta(seconds=schedule.jitter)
    while (found := _next_nominal_after(nominal, cursor)) is not None:
        fire = found + jitter_offset(schedule, found)
        if fire > after:
            return fire
        cursor = found
    return None


def _moved_next_after(schedule: Schedule, after: datetime) -> datetime | None:
    plain = replace(schedule, calendar=None)
    return shifted_next_after(
        schedule.calendar, schedule.calendar_policy, schedule.timezone, lambda t: next_fire_after(plain, t), after
    )


def _moved_last_at_or_before(schedule: Schedule, at: datetime) -> datetime | None:
    # Moved fires have no cheap reverse: step forward through widening windows, with the
    # same rule next_fire_after uses.
    return _last_stepping_forward(next_fire_after, schedule, at)


def _last_stepping_forward(step, schedule: Schedule, at: datetime) -> datetime | None:
    """The latest fire at or before `at` by `step` (a next-fire-after function), found by
    stepping forward from ever earlier starts (_LOOKBACKS) until one window holds a fire."""
    for lookback in _LOOKBACKS:
        cursor, last = at - lookback, None
        while (found := step(schedule, cursor)) is not None and found <= at:
            last = cursor = found
        if last is not None:
            return last
    return None


def calendar_note(schedule: Schedule, fire: datetime) -> str | None:
    """What the job's calendar does to `fire`, for previews: the skip reason, or the
    non-business days whose fires moved to it; None when it does nothing."""
    calendar = schedule.calendar
    if calendar is None:
        return None
    if schedule.calendar_policy == CalendarPolicy.SKIP:
        return skip_reason(calendar, schedule.timezone, fire)
    plain = replace(schedule, calendar=None)
    days = moved_from(calendar, schedule.calendar_policy, schedule.timezone, lambda t: next_fire_after(plain, t), fire)
    if not days:
        return None
    moved = ", ".join(f"{day.isoformat()} ({calendar.why_not(day)})" for day in days)
    return f"calendar: moved from {moved} ({schedule.calendar_policy} in {calendar.name})"


def _next_nominal_after(schedule: Schedule, after: datetime) -> datetime | None:
    if schedule.start_at is not None and after < schedule.start_at:
        # A fire exactly at start_at counts, so look from just before it.
        after = schedule.start_at - timedelta(microseconds=1)
    if after >= LATEST_INSTANT:
        return None
    found = _raw_next_after(schedule, after)
    if found is None or (schedule.end_at is not None and found > schedule.end_at):
        return None
    if found >= LATEST_INSTANT:
        return None
    return found


def last_fire_at_or_before(schedule: Schedule, at: datetime) -> datetime | None:
    """Return the latest fire time at or before `at`, or None.

    With jitter: the latest nominal time at or before `at` whose jittered fire is too;
    the one before it always is (offsets are shorter than gaps), so at most two steps.
    """
    if schedule.calendar is not None and schedule.calendar_policy != CalendarPolicy.SKIP:
        return _moved_last_at_or_before(schedule, at)
    if not schedule.jitter:
        return _last_nominal_at_or_before(schedule, at)
    nominal = schedule.nominal
    found = _last_nominal_at_or_before(nominal, at)
    while found is not None:
        fire = found + jitter_offset(schedule, found)
        if fire <= at:
            return fire
        found = _last_nominal_at_or_before(nominal, found - timedelta(microseconds=1))
    return None


def _last_nominal_at_or_before(schedule: Schedule, at: datetime) -> datetime | None:
    if schedule.end_at is not None and at > schedule.end_at:
        at = schedule.end_at
    found = _raw_last_at_or_before(schedule, at)
    if found is None or (schedule.start_at is not None and found < schedule.start_at):
        return None
    return found


def preview(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times strictly after `after` (fewer when the schedule ends)."""
    fires: list[datetime] = []
    current = after
    while len(fires) < count:
        nxt = next_fire_after(schedule, current)
        if nxt is None:
            break
        fires.append(nxt)
        current = nxt
    return fires


def fire_anomaly(schedule: Schedule, fire: datetime) -> str | None:
    """Why a cron fire lands where a reader of the expression would not expect it, or None.

    A wall time skipped by a spring-forward gap fires right after the gap; a wall time in a
    repeated autumn hour is ambiguous (a fixed-time job fires once, finer jobs at both).
    Interval and one-off schedules count real seconds, so they have no anomalies.
    """
    if not schedule.cron:
        return None
    if schedule.calendar is not None and schedule.calendar_policy != CalendarPolicy.SKIP:
        schedule, fire = _unmoved(schedule, fire)
    if schedule.jitter:  # judge the nominal time the jitter moved
        fire = _last_nominal_at_or_before(schedule.nominal, fire) or fire
    local = fire.astimezone(tzinfo_of(schedule.timezone))
    wall = local.replace(tzinfo=None)
    nominal = next(CronSim(schedule.cron, wall - timedelta(seconds=1)), None)
    if nominal != wall:
        return (
            f"dst_gap: the expression's local time falls in a DST gap that day; "
            f"fires at {wall:%H:%M}, right after the gap"
        )
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        return f"dst_repeated: {wall:%H:%M} occurs twice that day (clocks go back); this is the {('first', 'second')[local.fold]}"
    return None


def _unmoved(schedule: Schedule, fire: datetime) -> tuple[Schedule, datetime]:
    """The plain schedule and the fire a calendar moved to `fire`: a moved fire lies on a day
    its expression does not name, which is the calendar's doing (calendar_note says so), not
    a DST gap's. A fire that is also a plain one is judged as itself."""
    plain = replace(schedule, calendar=None)
    if next_fire_after(plain, fire - MICROSECOND) == fire:
        return plain, fire
    days = moved_from(
        schedule.calendar, schedule.calendar_policy, schedule.timezone, lambda t: next_fire_after(plain, t), fire
    )
    if not days:
        return plain, fire
    return plain, at_wall_time(days[0], fire.astimezone(tzinfo_of(schedule.timezone)).time(), schedule.timezone)
