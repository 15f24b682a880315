"""A preview of a job with a calendar shows a moved fire with the calendar's reason and
without a DST flag: a fire moved to a day its expression does not name is the calendar's
doing (schedules.fire_anomaly judges the fire it was moved from), while a real DST gap is
still flagged. These judge schedules alone; the API's preview is in
tests/integration/schedules/test_calendar_preview.py."""

from __future__ import annotations

from datetime import UTC, date, datetime

from scheduler_app import schedules

# Monday 2026-12-28 a holiday: the 28th's 18:00 fire moves back to Friday the 25th.
HOLIDAY = date(2026, 12, 28)
MOVED = datetime(2026, 12, 25, 18, 0, tzinfo=UTC)


def payroll(policy: str = "previous_business_day", **fields) -> schedules.Schedule:
    calendar = schedules.BusinessCalendar(
        name="ops", holidays=frozenset({HOLIDAY}), names={HOLIDAY: "Shutdown"}, **fields
    )
    return schedules.Schedule(cron="0 18 28 * *", timezone="UTC", calendar=calendar, calendar_policy=policy)


def test_a_fire_moved_by_the_calendar_is_not_flagged_as_a_dst_gap():
    schedule = payroll()

    assert schedules.next_fire_after(schedule, datetime(2026, 12, 20, tzinfo=UTC)) == MOVED
    assert schedules.fire_anomaly(schedule, MOVED) is None
    assert schedules.calendar_note(schedule, MOVED) == (
        "calendar: moved from 2026-12-28 (Shutdown) (previous_business_day in ops)"
    )


def test_a_fire_moved_later_is_not_flagged_either():
    schedule = payroll("next_business_day")
    moved = schedules.next_fire_after(schedule, datetime(2026, 12, 20, tzinfo=UTC))

    assert moved == datetime(2026, 12, 29, 18, 0, tzinfo=UTC)
    assert schedules.fire_anomaly(schedule, moved) is None


def test_a_real_dst_gap_is_still_flagged_on_a_job_with_a_calendar():
    calendar = schedules.BusinessCalendar(name="every-day", weekdays=frozenset(range(7)))
    schedule = schedules.Schedule(
        cron="30 2 * * *", timezone="Europe/Berlin", calendar=calendar, calendar_policy="next_business_day"
    )
    fire = schedules.next_fire_after(schedule, datetime(2026, 3, 28, 12, 0, tzinfo=UTC))

    assert fire == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST, right after the gap
    assert (schedules.fire_anomaly(schedule, fire) or "").startswith("dst_gap")
