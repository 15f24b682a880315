"""The fires a beat records for a due job: the misfire policy (run once, run all up to a cap,
skip) within the catch-up window, and a cache of next fires per expression."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler_app.schedules.base import MisfirePolicy, Schedule, SkipReason
from scheduler_app.schedules.calendars import CalendarPolicy, skip_reason
from scheduler_app.schedules.fires import last_fire_at_or_before, next_fire_after


@dataclass
class Plan:
    """What to record for one due job: runs to create, fires to record as skipped, and
    the job's next fire time (None: nothing left to fire)."""

    fires: list[datetime] = field(default_factory=list)
    skipped: list[tuple[datetime, str]] = field(default_factory=list)
    next_run_at: datetime | None = None


@dataclass(frozen=True)
class MisfireRules:
    policy: MisfirePolicy = MisfirePolicy.RUN_ONCE
    grace: timedelta = timedelta(seconds=60)  # later than this, a fire is "missed"
    catchup_window: timedelta = timedelta(days=1)  # missed fires older than this never run
    run_all_cap: int = 100  # run_all runs at most this many missed fires
    limit: int = 1000  # fire times planned per call; the rest wait for the next call


def plan_fires(
    schedule: Schedule,
    due_at: datetime,
    now: datetime,
    rules: MisfireRules,
    *,
    cache: NextFireCache | None = None,
) -> Plan:
    """Decide what to do with a job whose next fire time `due_at` has passed.

    Fires at most `rules.grace` late are on time and always run. Older ones were missed
    (the beat was down or behind) and follow the misfire policy; missed fires older than
    the catch-up window are skipped in one record (at the first of them) whose reason says
    how far the gap reached, so a long outage costs one row, not one per fire.

    At most `rules.limit` fire times are planned per call. When more are due, next_run_at
    stays in the past and the job is claimed again on the next turn.

    A job with a calendar under `skip` records each fire on a non-business day as skipped
    with the calendar's reason, whatever the misfire policy; under the moving policies the
    sequence stepped through is the moved one already (next_fire_after).
    """
    step = cache.next_fire_after if cache is not None else next_fire_after
    skipping = schedule.calendar if schedule.calendar_policy == CalendarPolicy.SKIP else None
    plan = Plan()
    # The catch-up window never reaches into the grace: an on-time fire always runs.
    window_start = min(now - rules.catchup_window, now - rules.grace)
    cursor: datetime | None = due_at
    if due_at < window_start:
        last_outside = last_fire_at_or_before(schedule, window_start - timedelta(microseconds=1))
        if last_outside is not None:
            note = f"{SkipReason.OUTSIDE_CATCHUP_WINDOW}: missed fires up to {last_outside.isoformat()}"
            plan.skipped.append((due_at, note))
            cursor = next_fire_after(schedule, last_outside)
        else:  # no fire before the window (due_at is none: a start moved later): none missed there
            cursor = next_fire_after(schedule, due_at - timedelta(microseconds=1))

    on_time_from = now - rules.grace
    latest_missed = run_all_from = None
    if cursor is not None and cursor < on_time_from:  # only a late job pays for this
        latest_missed = last_fire_at_or_before(schedule, on_time_from - timedelta(microseconds=1))
    if rules.policy is MisfirePolicy.RUN_ALL and latest_missed is not None:
        run_all_from = _nth_fire_back(schedule, latest_missed, rules.run_all_cap)

    planned = len(plan.skipped)
    while cursor is not None and cursor <= now and planned < rules.limit:
        if skipping is not None and (why := skip_reason(skipping, schedule.timezone, cursor)) is not None:
            plan.skipped.append((cursor, why))
        elif cursor >= on_time_from:
            plan.fires.append(cursor)
        elif rules.policy is MisfirePolicy.SKIP:
            plan.skipped.append((cursor, SkipReason.MISFIRE_SKIP.value))
        elif rules.policy is MisfirePolicy.RUN_ONCE:
            if cursor == latest_missed and not _has_fire_between(schedule, cursor, now):
                plan.fires.append(cursor)
            else:
                plan.skipped.append((cursor, SkipReason.COALESCED.value))
        elif run_all_from is not None and cursor >= run_all_from:
            plan.fires.append(cursor)
        else:
            plan.skipped.append((cursor, SkipReason.RUN_ALL_CAP.value))
        planned += 1
        cursor = step(schedule, cursor)
    plan.next_run_at = cursor
    return plan


def _has_fire_between(schedule: Schedule, after: datetime, until: datetime) -> bool:
    nxt = next_fire_after(schedule, after)
    return nxt is not None and nxt <= until


def _nth_fire_back(schedule: Schedule, latest: datetime, n: int) -> datetime:
    """The earliest of the `n` fires ending at `latest` (inclusive)."""
    current = latest
    for _ in range(max(n, 1) - 1):
        previous = last_fire_at_or_before(schedule, current - timedelta(microseconds=1))
        if previous is None:
            break
        current = previous
    return current


class NextFireCache:
    """Memoises next_fire_after for one batch.

    A million tenants' midnight jobs share a handful of (expression, zone, instant)
    triples; computing each once per batch keeps planning cheap.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[Schedule, datetime], datetime | None] = {}

    def next_fire_after(self, schedule: Schedule, after: datetime) -> datetime | None:
        key = (schedule, after)
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = next_fire_after(schedule, after)
            return value
