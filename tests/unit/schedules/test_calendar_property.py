"""Business-day calendars, as a property over 2024-2030: a beat planning a daily, weekly or
monthly cron job on time, fire after fire (schedules.plan_fires, as dispatch/plan.py calls
it), with a calendar of a real country's public holidays, in a zone with DST, under each
policy:

- every fire it records as a run lands on a business day of the calendar;
- skip: the runs are exactly the plain schedule's business-day fires, and every other fire
  is recorded as skipped with the calendar's reason (the holiday's name when it has one);
- next/previous_business_day: each plain fire runs once, at shift_fire's instant (the same
  wall time on the nearest business day after / before); fires moved onto one instant
  coalesce into one run, and no run is recorded twice;
- DST: a moved fire keeps its wall time in the job's zone (a wall time the target day skips
  runs at the end of the gap, as cron does).

The counts (plain fires, runs, skipped, moved, coalesced) are printed at the end.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app import schedules
from scheduler_app.models import public_holidays
from scheduler_app.schedules.calendars import at_wall_time, local_day

WINDOW = (datetime(2024, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC))
# Planned from a month before to a month after, so moves across the window's edges are whole.
SPAN = (WINDOW[0] - timedelta(days=31), WINDOW[1] + timedelta(days=31))
CALENDARS = [("US", ""), ("GB", "ENG"), ("DE", "BY"), ("JP", "")]
ZONES = ["America/New_York", "Europe/London", "Europe/Berlin", "Australia/Sydney", "Asia/Tokyo"]
CRONS = [
    "0 9 * * *",  # daily
    "30 2 * * *",  # daily, in New York's and Berlin's spring gaps
    "30 1 * * *",  # daily, in London's gap and repeated hour
    "0 8 * * 1",  # weekly, Monday
    "45 17 * * 6",  # weekly, Saturday: every fire moves or is skipped
    "0 9 1 * *",  # monthly, the first
    "0 18 31 * *",  # monthly, the 31st (month-end payroll)
]
RULES = schedules.MisfireRules(policy=schedules.MisfirePolicy.RUN_ALL, grace=timedelta(seconds=60))
TOTALS: Counter = Counter()


@cache
def calendar_of(country: str, subdivision: str) -> schedules.BusinessCalendar:
    names = public_holidays(country, subdivision, range(2023, 2032))
    label = f"{country}-{subdivision}" if subdivision else country
    return schedules.BusinessCalendar(name=label, holidays=frozenset(names), names=names)


def beat_records(schedule: schedules.Schedule) -> tuple[list[datetime], list[tuple[datetime, str]]]:
    """What a beat on time records over SPAN: the runs and the skipped fires."""
    runs, skipped = [], []
    due = schedules.next_fire_after(schedule, SPAN[0])
    while due is not None and due < SPAN[1]:
        plan = schedules.plan_fires(schedule, due, due, RULES)
        runs += plan.fires
        skipped += plan.skipped
        assert plan.next_run_at is None or plan.next_run_at > due
        due = plan.next_run_at
    return runs, skipped


def plain_fires(schedule: schedules.Schedule) -> list[datetime]:
    fires, at = [], SPAN[0]
    while (at := schedules.next_fire_after(schedule, at)) is not None and at < SPAN[1]:
        fires.append(at)
    return fires


def inside(at: datetime) -> bool:
    return WINDOW[0] <= at < WINDOW[1]


def wall_time_kept(plain: datetime, moved: datetime, zone: str) -> bool:
    target = local_day(zone, moved)
    return moved == at_wall_time(target, plain.astimezone(schedules.zone(zone)).time(), zone)


def check(cron: str, zone: str, where: tuple[str, str], policy: str) -> None:
    calendar = calendar_of(*where)
    plain_schedule = schedules.Schedule(cron=cron, timezone=zone)
    schedule = replace(plain_schedule, calendar=calendar, calendar_policy=policy)
    plain = plain_fires(plain_schedule)
    runs, skipped = beat_records(schedule)

    assert len(runs) == len(set(runs)), "a fire recorded twice"
    assert all(calendar.is_business_day(local_day(zone, at)) for at in runs)
    in_window = [at for at in plain if inside(at)]
    if policy == schedules.CalendarPolicy.SKIP:
        business = [at for at in plain if calendar.is_business_day(local_day(zone, at))]
        assert runs == business
        assert [at for at, _ in skipped] == [at for at in plain if at not in set(business)]
        for at, reason in skipped:
            day = local_day(zone, at)
            assert (
                reason == f"calendar: {day.isoformat()} is not a business day in {calendar.name} "
                f"({calendar.names.get(day) or ('holiday' if day in calendar.holidays else day.strftime('%A'))})"
            )
        TOTALS.update(plain=len(in_window), runs=sum(map(inside, runs)), skipped=sum(inside(at) for at, _ in skipped))
        return
    assert skipped == []
    moved = {at: schedules.shift_fire(calendar, policy, zone, at) for at in plain}
    assert sorted({to for to in moved.values() if inside(to)}) == [at for at in runs if inside(at)], (
        "the runs are not exactly the shifted fires"
    )
    for at, to in moved.items():
        assert (to == at) == calendar.is_business_day(local_day(zone, at))
        assert wall_time_kept(at, to, zone), f"{at} moved to {to}: the wall time changed"
        assert abs(to - at) < timedelta(days=15)
    window_runs = {to for at, to in moved.items() if inside(at)}
    TOTALS.update(
        plain=len(in_window),
        runs=len(window_runs),
        moved=sum(1 for at in in_window if moved[at] != at),
        coalesced=len(in_window) - len(window_runs),
    )


# derandomize: the same examples every run, so the printed counts can be quoted.
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    cron=st.sampled_from(CRONS),
    zone=st.sampled_from(ZONES),
    where=st.sampled_from(CALENDARS),
    policy=st.sampled_from(list(schedules.CalendarPolicy)),
)
def _each_example(cron, zone, where, policy):
    check(cron, zone, where, policy)
    TOTALS.update(examples=1, **{f"examples_{policy}": 1})


def test_calendar_fires_land_on_business_days_none_lost_or_doubled(capsys):
    TOTALS.clear()

    _each_example()

    with capsys.disabled():
        print(
            f"\ncalendar property over {WINDOW[0]:%Y}-{WINDOW[1] - timedelta(days=1):%Y}: "
            + ", ".join(f"{key} {value}" for key, value in sorted(TOTALS.items()))
        )
    assert TOTALS["examples"] >= 40


def test_every_policy_country_and_a_dst_zone_is_checked_once_at_least():
    for policy in schedules.CalendarPolicy:
        for where in CALENDARS:
            check("0 9 * * *", "Europe/London" if where[0] != "US" else "America/New_York", where, policy)
    check("30 2 * * *", "America/New_York", ("US", ""), schedules.CalendarPolicy.PREVIOUS_BUSINESS_DAY)


def test_a_month_end_fire_on_a_saturday_runs_the_friday_before():
    calendar = calendar_of("GB", "ENG")
    schedule = schedules.Schedule(
        cron="0 18 31 * *",
        timezone="Europe/London",
        calendar=calendar,
        calendar_policy=schedules.CalendarPolicy.PREVIOUS_BUSINESS_DAY,
    )

    # 2026-01-31 is a Saturday: the fire after December's runs on Friday the 30th, 18:00 local.
    fire = schedules.next_fire_after(schedule, datetime(2025, 12, 31, 18, tzinfo=UTC))

    assert fire == datetime(2026, 1, 30, 18, tzinfo=UTC)
    assert date(2026, 1, 31).weekday() == 5
