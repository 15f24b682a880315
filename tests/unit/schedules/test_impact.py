"""schedules.compare: the fires a job holds against the fires its schedule has with the data
installed. A held fire "computed with other data" is given as the instant that data put it
at (Asia/Tbilisi is UTC+04:00 in every release: a held 06:00Z for 09:00 local is what a
release saying +03:00 computed)."""

from datetime import UTC, date, datetime, timedelta

from scheduler_app import schedules
from scheduler_app.schedules import BusinessCalendar, Cause, ChangeKind, Schedule, compare

NOW = datetime(2030, 3, 4, 12, 0, tzinfo=UTC)  # a Monday
HORIZON = timedelta(days=30)
DAILY_TBILISI = Schedule(cron="0 9 * * *", timezone="Asia/Tbilisi")


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def bank(*holidays: date, name: str = "bank") -> BusinessCalendar:
    return BusinessCalendar(
        name=name, weekdays=frozenset(range(7)), holidays=frozenset(holidays), names=dict.fromkeys(holidays, "New Day")
    )


def test_compare_finds_nothing_when_the_held_fire_is_the_next_one():
    assert compare(DAILY_TBILISI, next_run_at=utc(2030, 3, 5, 5), now=NOW, horizon=HORIZON) == []


def test_compare_reports_a_held_fire_a_zone_change_moved_with_the_offset_it_had():
    changes = compare(DAILY_TBILISI, next_run_at=utc(2030, 3, 5, 6), now=NOW, horizon=HORIZON)

    [change] = changes
    assert (change.kind, change.old, change.new) == (ChangeKind.MOVED, utc(2030, 3, 5, 6), utc(2030, 3, 5, 5))
    assert (change.cause, change.source, change.held) == (Cause.ZONE, "Asia/Tbilisi", "next_run_at")
    assert change.detail == ("2030-03-05 09:00 local is UTC+04:00 now, was UTC+03:00 when the held fire was computed")


def test_compare_reports_a_fire_that_appeared_before_the_held_one():
    hourly = Schedule(cron="30 * * * *", timezone="Asia/Kolkata")  # :30 local is :00 UTC at +05:30
    changes = compare(hourly, next_run_at=utc(2030, 3, 4, 15, 30), now=NOW, horizon=HORIZON)

    kinds = [(change.kind, change.old, change.new) for change in changes]
    assert kinds == [
        (ChangeKind.APPEARED, None, utc(2030, 3, 4, 13)),
        (ChangeKind.APPEARED, None, utc(2030, 3, 4, 14)),
        (ChangeKind.MOVED, utc(2030, 3, 4, 15, 30), utc(2030, 3, 4, 15)),
    ]
    assert changes[-1].detail == (
        "2030-03-04 20:30 local is UTC+05:30 now, was UTC+05:00 when the held fire was computed"
    )


def test_compare_says_how_many_more_appeared_past_the_listed_ones():
    minutely = Schedule(cron="* * * * *", timezone="UTC")

    changes = compare(minutely, next_run_at=utc(2030, 3, 4, 13), now=NOW, horizon=HORIZON)

    appeared = [change for change in changes if change.kind == ChangeKind.APPEARED]
    assert len(appeared) == schedules.impact.MAX_APPEARED
    assert appeared[-1].more == 10 * schedules.impact.MAX_APPEARED


def test_compare_reports_a_held_fire_with_no_fire_near_it_as_vanished():
    mondays = Schedule(cron="0 9 * * 1", timezone="UTC")
    tuesday = datetime(2030, 3, 5, 12, tzinfo=UTC)

    [change] = compare(mondays, next_run_at=utc(2030, 3, 6, 9), now=tuesday, horizon=HORIZON)

    assert (change.kind, change.old, change.new, change.cause) == (
        ChangeKind.VANISHED,
        utc(2030, 3, 6, 9),
        None,
        Cause.ZONE,
    )
    assert change.detail == "2030-03-06 09:00 local (UTC+00:00) is no fire now"


def test_compare_reports_a_new_holiday_that_moves_a_held_fire_under_next_business_day():
    holiday = date(2030, 3, 5)
    schedule = Schedule(cron="0 9 * * *", timezone="UTC", calendar=bank(holiday), calendar_policy="next_business_day")

    [change] = compare(schedule, next_run_at=utc(2030, 3, 5, 9), now=NOW, horizon=HORIZON)

    assert (change.kind, change.old, change.new) == (ChangeKind.MOVED, utc(2030, 3, 5, 9), utc(2030, 3, 6, 9))
    assert (change.cause, change.source) == (Cause.CALENDAR, "bank")
    assert change.detail == "2030-03-05 is not a business day (New Day)"


def test_compare_blames_the_zone_not_the_calendar_when_the_wall_time_moved():
    schedule = Schedule(
        cron="0 9 * * *", timezone="Asia/Tbilisi", calendar=bank(), calendar_policy="previous_business_day"
    )

    [change] = compare(schedule, next_run_at=utc(2030, 3, 5, 6), now=NOW, horizon=HORIZON)

    assert (change.kind, change.cause, change.source) == (ChangeKind.MOVED, Cause.ZONE, "Asia/Tbilisi")


def test_compare_leaves_a_skip_calendar_alone_since_the_beat_reads_it_at_the_fire():
    schedule = Schedule(cron="0 9 * * *", timezone="UTC", calendar=bank(date(2030, 3, 5)), calendar_policy="skip")

    assert compare(schedule, next_run_at=utc(2030, 3, 5, 9), now=NOW, horizon=HORIZON) == []


def test_compare_checks_recorded_runs_too():
    changes = compare(
        DAILY_TBILISI, next_run_at=utc(2030, 3, 5, 5), recorded=[utc(2030, 3, 4, 6)], now=NOW, horizon=HORIZON
    )

    [change] = changes
    assert (change.kind, change.old, change.new, change.held) == (
        ChangeKind.MOVED,
        utc(2030, 3, 4, 6),
        utc(2030, 3, 4, 5),
        "ledger",
    )


def test_compare_leaves_held_fires_past_the_horizon_and_reports_fires_before_it():
    changes = compare(DAILY_TBILISI, next_run_at=utc(2030, 6, 1, 6), now=NOW, horizon=timedelta(days=2))

    assert [(change.kind, change.new) for change in changes] == [
        (ChangeKind.APPEARED, utc(2030, 3, 5, 5)),
        (ChangeKind.APPEARED, utc(2030, 3, 6, 5)),
    ]


def test_compare_pairs_a_held_fire_with_a_nearer_past_one():
    # 06:00Z held, 05:00Z by the data now; at 05:30Z that fire is due, not tomorrow's.
    at_half_past_five = utc(2030, 3, 4, 5, 30)

    [change] = compare(DAILY_TBILISI, next_run_at=utc(2030, 3, 4, 6), now=at_half_past_five, horizon=HORIZON)

    assert (change.kind, change.old, change.new) == (ChangeKind.MOVED, utc(2030, 3, 4, 6), utc(2030, 3, 4, 5))


def test_compare_checks_a_due_next_run_at_too():
    [change] = compare(DAILY_TBILISI, next_run_at=utc(2030, 3, 4, 6), now=NOW, horizon=HORIZON)

    assert (change.kind, change.old, change.new) == (ChangeKind.MOVED, utc(2030, 3, 4, 6), utc(2030, 3, 4, 5))


def test_intervals_and_one_offs_never_change_with_a_zone():
    every = Schedule(every=3600, anchor=utc(2030, 1, 1), timezone="Asia/Tbilisi")
    once = Schedule(at=utc(2030, 3, 9, 6), timezone="Asia/Tbilisi")

    assert compare(every, next_run_at=utc(2030, 3, 4, 13), now=NOW, horizon=HORIZON) == []
    assert compare(once, next_run_at=utc(2030, 3, 9, 6), now=NOW, horizon=HORIZON) == []


def test_a_change_has_one_fingerprint_per_job():
    [change] = compare(DAILY_TBILISI, next_run_at=utc(2030, 3, 5, 6), now=NOW, horizon=HORIZON)
    [again] = compare(DAILY_TBILISI, next_run_at=utc(2030, 3, 5, 6), now=NOW + timedelta(hours=1), horizon=HORIZON)

    assert change.fingerprint(7) == again.fingerprint(7)
    assert change.fingerprint(7) != change.fingerprint(8)


def test_compare_reports_a_fire_a_removed_holiday_brings_back_before_the_held_one():
    # Held: Wednesday 09:00, where Tuesday's fire had moved (Tuesday was a holiday then).
    schedule = Schedule(cron="0 9 * * *", timezone="UTC", calendar=bank(), calendar_policy="next_business_day")

    [change] = compare(schedule, next_run_at=utc(2030, 3, 6, 9), now=utc(2030, 3, 4, 12), horizon=HORIZON)

    assert (change.kind, change.new, change.cause, change.source) == (
        ChangeKind.APPEARED,
        utc(2030, 3, 5, 9),
        Cause.CALENDAR,
        "bank",
    )
    assert change.detail == "2030-03-05 is a business day"
