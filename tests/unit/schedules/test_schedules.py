"""Tests for scheduler_app.schedules: the pure schedule arithmetic (no database, no clock).

Every instant is a fixed UTC literal; the comment beside it gives the wall-clock time in the
job's zone. DST rules under test (Debian cron, as cronsim implements them): a local time
skipped by spring-forward fires right after the gap, a fixed-hour job in the repeated
autumn hour fires once, and hourly-or-finer jobs fire at every real instant.

2024 transitions used below:
  America/New_York  2024-03-10 07:00Z  02:00 EST -> 03:00 EDT  (02:00-03:00 local skipped)
                    2024-11-03 06:00Z  02:00 EDT -> 01:00 EST  (01:00-02:00 local repeated)
  Europe/Berlin     2024-03-31 01:00Z  02:00 CET -> 03:00 CEST (02:00-03:00 local skipped)
                    2024-10-27 01:00Z  03:00 CEST -> 02:00 CET (02:00-03:00 local repeated)
"""

from __future__ import annotations

import contextlib
import signal
import time
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler_app.schedules import (
    InvalidSchedule,
    MisfirePolicy,
    MisfireRules,
    NextFireCache,
    Plan,
    Schedule,
    SkipReason,
    last_fire_at_or_before,
    next_fire_after,
    normalize_cron,
    plan_fires,
    preview,
    validate,
    zone,
)

US = timedelta(microseconds=1)


def U(year, month, day, hour=0, minute=0, second=0, microsecond=0) -> datetime:
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=UTC)


def cron(expression: str, tz: str = "UTC", **window) -> Schedule:
    return validate(Schedule(cron=expression, timezone=tz, **window))


def fires_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every fire in [start, end), found by stepping next_fire_after."""
    found: list[datetime] = []
    current = start - US
    while True:
        current = next_fire_after(schedule, current)
        if current is None or current >= end:
            return found
        found.append(current)


@contextlib.contextmanager
def deadline(seconds: float):
    """Turn a hang into a TimeoutError, then restore whatever alarm pytest-timeout had set."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds}s (infinite loop?)")

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay:
            remaining = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 0.001), previous_interval)


# --------------------------------------------------------------------------------------
# 1. next_fire_after: cron in UTC and other zones
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        # Strictly after: a fire exactly at `after` is not returned.
        ("*/5 * * * *", "UTC", U(2024, 1, 1, 0, 0), U(2024, 1, 1, 0, 5)),
        ("*/5 * * * *", "UTC", U(2024, 1, 1, 0, 4, 59, 999999), U(2024, 1, 1, 0, 5)),
        ("*/5 * * * *", "UTC", U(2024, 1, 1, 0, 0, 0, 1), U(2024, 1, 1, 0, 5)),
        # Weekdays at 09:00: Saturday 2024-01-06 -> Monday 2024-01-08.
        ("0 9 * * 1-5", "UTC", U(2024, 1, 6, 10, 0), U(2024, 1, 8, 9, 0)),
        # Sunday (0) and 7 are both Sunday; 2024-01-07 is a Sunday.
        ("0 12 * * 0", "UTC", U(2024, 1, 1), U(2024, 1, 7, 12, 0)),
        ("0 12 * * 7", "UTC", U(2024, 1, 1), U(2024, 1, 7, 12, 0)),
        # Month rollover and year rollover.
        ("0 0 1 * *", "UTC", U(2024, 1, 31, 12, 0), U(2024, 2, 1)),
        ("59 23 31 12 *", "UTC", U(2024, 12, 31, 23, 59), U(2025, 12, 31, 23, 59)),
        # 29 February only exists in leap years: 2024 -> 2028.
        ("0 0 29 2 *", "UTC", U(2024, 3, 1), U(2028, 2, 29)),
        # Day-of-month and day-of-week both restricted: either matches (Vixie/Debian OR).
        # Friday 2024-01-12 00:00 -> Saturday 13th, not the next Friday the 13th (2024-09-13).
        ("0 0 13 * 5", "UTC", U(2024, 1, 12), U(2024, 1, 13)),
        # Lists, ranges and steps.
        ("5,35 8-10/2 * * *", "UTC", U(2024, 5, 1, 8, 35), U(2024, 5, 1, 10, 5)),
        ("0 9-10/2 * * *", "UTC", U(2024, 1, 1, 9), U(2024, 1, 2, 9)),
        # BUG (cronsim 2.8 parsing, accepted by normalize_cron): a one-value range with a step,
        # "9-9/2", is read as "9/2" (9, 11, ..., 23). Cron means hour 9 only, like "9-10/2"
        # above. Expected 2024-01-02 09:00Z, got 2024-01-01 11:00Z.
        ("0 9-9/2 * * *", "UTC", U(2024, 1, 1, 9), U(2024, 1, 2, 9)),
        # Zones without DST: Kathmandu is UTC+05:45, Tokyo UTC+09:00.
        # 2024-06-01 00:00Z = 05:45 NPT -> 02:30 NPT on 06-02 = 2024-06-01 20:45Z.
        ("30 2 * * *", "Asia/Kathmandu", U(2024, 6, 1), U(2024, 6, 1, 20, 45)),
        # 2024-06-01 00:00Z is exactly 09:00 JST -> the next day's 09:00 JST.
        ("0 9 * * *", "Asia/Tokyo", U(2024, 6, 1), U(2024, 6, 2)),
    ],
)
def test_next_fire_after_returns_first_cron_fire_strictly_after(expression, tz, after, expected):
    result = next_fire_after(cron(expression, tz), after)
    assert result == expected
    assert result.tzinfo is UTC


@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        # --- America/New_York, spring forward 2024-03-10 (02:00-03:00 EST skipped) ---
        # 00:00 EST -> 02:30 does not exist, fires right after the gap: 03:00 EDT = 07:00Z.
        ("30 2 * * *", "America/New_York", U(2024, 3, 10, 5, 0), U(2024, 3, 10, 7, 0)),
        # The day after, 02:30 EDT = 06:30Z again.
        ("30 2 * * *", "America/New_York", U(2024, 3, 10, 7, 0), U(2024, 3, 11, 6, 30)),
        # Before the gap: 01:30 EST = 06:30Z. After it: 03:30 EDT = 07:30Z.
        ("30 1 * * *", "America/New_York", U(2024, 3, 10, 5, 0), U(2024, 3, 10, 6, 30)),
        ("30 3 * * *", "America/New_York", U(2024, 3, 10, 5, 0), U(2024, 3, 10, 7, 30)),
        # --- America/New_York, fall back 2024-11-03 (01:00-02:00 repeated) ---
        # 00:00 EDT -> 01:30 EDT (first pass) = 05:30Z ...
        ("30 1 * * *", "America/New_York", U(2024, 11, 3, 4, 0), U(2024, 11, 3, 5, 30)),
        # ... and not again at 01:30 EST (06:30Z): next is 2024-11-04 01:30 EST = 06:30Z.
        ("30 1 * * *", "America/New_York", U(2024, 11, 3, 5, 30), U(2024, 11, 4, 6, 30)),
        # 02:30 EST = 07:30Z.
        ("30 2 * * *", "America/New_York", U(2024, 11, 3, 4, 0), U(2024, 11, 3, 7, 30)),
        # --- Europe/Berlin, spring forward 2024-03-31 (02:00-03:00 CET skipped) ---
        # 00:00 CET = 2024-03-30 23:00Z -> right after the gap: 03:00 CEST = 01:00Z.
        ("30 2 * * *", "Europe/Berlin", U(2024, 3, 30, 23, 0), U(2024, 3, 31, 1, 0)),
        # Next day 02:30 CEST = 00:30Z.
        ("30 2 * * *", "Europe/Berlin", U(2024, 3, 31, 1, 0), U(2024, 4, 1, 0, 30)),
        # --- Europe/Berlin, fall back 2024-10-27 (02:00-03:00 repeated) ---
        # 00:00 CEST = 2024-10-26 22:00Z -> 02:30 CEST (first pass) = 00:30Z ...
        ("30 2 * * *", "Europe/Berlin", U(2024, 10, 26, 22, 0), U(2024, 10, 27, 0, 30)),
        # ... and not at 02:30 CET (01:30Z): next is 2024-10-28 02:30 CET = 01:30Z.
        ("30 2 * * *", "Europe/Berlin", U(2024, 10, 27, 0, 30), U(2024, 10, 28, 1, 30)),
        # Hourly jobs keep firing through the repeated hour: 02:00 CET (second pass) = 01:00Z.
        ("0 * * * *", "Europe/Berlin", U(2024, 10, 27, 0, 0), U(2024, 10, 27, 1, 0)),
        ("0 * * * *", "America/New_York", U(2024, 11, 3, 5, 0), U(2024, 11, 3, 6, 0)),
    ],
)
def test_next_fire_after_follows_debian_dst_rules(expression, tz, after, expected):
    assert next_fire_after(cron(expression, tz), after) == expected


# (zone, local day start in UTC, local next-day start in UTC) for the four transition days.
NY_SPRING = ("America/New_York", U(2024, 3, 10, 5), U(2024, 3, 11, 4))  # 23 h
NY_AUTUMN = ("America/New_York", U(2024, 11, 3, 4), U(2024, 11, 4, 5))  # 25 h
BERLIN_SPRING = ("Europe/Berlin", U(2024, 3, 30, 23), U(2024, 3, 31, 22))  # 23 h
BERLIN_AUTUMN = ("Europe/Berlin", U(2024, 10, 26, 22), U(2024, 10, 27, 23))  # 25 h


@pytest.mark.parametrize(
    ("day", "expression", "expected"),
    [
        # Daily job at a local time inside the gap: once, right after the gap.
        (NY_SPRING, "30 2 * * *", [U(2024, 3, 10, 7, 0)]),  # 03:00 EDT
        (BERLIN_SPRING, "30 2 * * *", [U(2024, 3, 31, 1, 0)]),  # 03:00 CEST
        # Daily job in the repeated hour: exactly once (first pass).
        (NY_AUTUMN, "30 1 * * *", [U(2024, 11, 3, 5, 30)]),  # 01:30 EDT
        (BERLIN_AUTUMN, "30 2 * * *", [U(2024, 10, 27, 0, 30)]),  # 02:30 CEST
        # Fixed hours 1-3: the skipped 02:00 collapses onto 03:00 EDT without repeating it.
        (NY_SPRING, "0 1-3 * * *", [U(2024, 3, 10, 6), U(2024, 3, 10, 7)]),  # 01:00 EST, 03:00 EDT
        # 01:00 EDT, 02:00 EST, 03:00 EST (01:00 EST is the repeat and is not fired).
        (NY_AUTUMN, "0 1-3 * * *", [U(2024, 11, 3, 5), U(2024, 11, 3, 7), U(2024, 11, 3, 8)]),
    ],
)
def test_next_fire_after_fixed_time_job_fires_once_on_dst_days(day, expression, expected):
    tz, start, end = day
    assert fires_between(cron(expression, tz), start, end) == expected


@pytest.mark.parametrize("day", [NY_SPRING, NY_AUTUMN, BERLIN_SPRING, BERLIN_AUTUMN], ids=lambda d: str(d[1].date()))
@pytest.mark.parametrize(
    ("expression", "step", "spring_count", "autumn_count"),
    [("0 * * * *", timedelta(hours=1), 23, 25), ("*/15 * * * *", timedelta(minutes=15), 92, 100)],
)
def test_next_fire_after_hourly_and_finer_jobs_fire_at_every_real_instant(
    day, expression, step, spring_count, autumn_count
):
    tz, start, end = day
    fires = fires_between(cron(expression, tz), start, end)
    # Both zones are whole-hour offsets, so local :00/:15 instants are UTC :00/:15 instants:
    # every real instant from local midnight to the next local midnight, none skipped or repeated.
    expected_count = spring_count if end - start == timedelta(hours=23) else autumn_count
    assert len(fires) == expected_count
    assert fires == [start + k * step for k in range(expected_count)]


@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        # Control: `after` in the FIRST pass of the repeated hour (01:10 EDT = 05:10Z).
        ("30 1 * * *", "America/New_York", U(2024, 11, 3, 5, 10), U(2024, 11, 3, 5, 30)),
        # Control: an every-15-minutes job in the second pass (01:10 EST = 06:10Z) -> 01:15 EST.
        ("*/15 * * * *", "America/New_York", U(2024, 11, 3, 6, 10), U(2024, 11, 3, 6, 15)),
        # BUG: `after` in the SECOND pass, 01:10 EST = 06:10Z. The day's 01:30 fire already
        # happened at 01:30 EDT = 05:30Z, so the next is 2024-11-04 01:30 EST = 06:30Z.
        # schedules.py returns 2024-11-03 05:30Z, which is BEFORE `after`.
        ("30 1 * * *", "America/New_York", U(2024, 11, 3, 6, 10), U(2024, 11, 4, 6, 30)),
        # BUG, same in Berlin: 02:10 CET (second pass) = 01:10Z; the 02:30 CEST fire was at
        # 00:30Z; next is 2024-10-28 02:30 CET = 01:30Z. Returns 2024-10-27 00:30Z.
        ("30 2 * * *", "Europe/Berlin", U(2024, 10, 27, 1, 10), U(2024, 10, 28, 1, 30)),
    ],
)
def test_next_fire_after_from_second_pass_of_repeated_hour_is_strictly_later(expression, tz, after, expected):
    result = next_fire_after(cron(expression, tz), after)
    assert result > after
    assert result == expected


def minutes(start: datetime, count: int) -> list[datetime]:
    return [start + timedelta(minutes=k) for k in range(count)]


@pytest.mark.parametrize(
    ("expression", "tz", "start", "end", "expected"),
    [
        # Lord Howe goes back half an hour at 2024-04-06 15:00Z (02:00 LHDT -> 01:30 LHST), so
        # 01:30 happens at 14:30Z and again at 15:00Z. BUG: the fire at 15:00Z was missing.
        (
            "30 * * * *",
            "Australia/Lord_Howe",
            U(2024, 4, 6, 14),
            U(2024, 4, 6, 16, 1),
            [U(2024, 4, 6, 14, 30), U(2024, 4, 6, 15), U(2024, 4, 6, 16)],
        ),
        # ... and 02:00 LHST comes at 15:30Z. BUG: missing (next was 04:00 LHST = 17:30Z).
        (
            "0 */2 * * *",
            "Australia/Lord_Howe",
            U(2024, 4, 6, 14),
            U(2024, 4, 6, 17, 31),
            [U(2024, 4, 6, 15, 30), U(2024, 4, 6, 17, 30)],
        ),
        # Chatham goes back an hour at 2024-04-06 14:00Z (03:45 CHADT -> 02:45 CHAST): 02:00-02:59
        # CHADT is 12:15Z-13:14Z, and 02:45-02:59 CHAST comes again at 14:00Z-14:14Z.
        # BUG: the second 02:45-02:59 was missing.
        (
            "* 2 * * *",
            "Pacific/Chatham",
            U(2024, 4, 6, 12),
            U(2024, 4, 6, 16),
            minutes(U(2024, 4, 6, 12, 15), 60) + minutes(U(2024, 4, 6, 14), 15),
        ),
    ],
)
def test_hourly_and_finer_jobs_fire_at_every_real_instant_around_half_hour_and_45_minute_shifts(
    expression, tz, start, end, expected
):
    assert fires_between(cron(expression, tz), start, end) == expected


@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        # New York, 2024-11-03: 06:00Z is 01:00 EST, the start of the second pass of 01:xx.
        # Every minute of 01:xx fired in the first pass (05:00Z-05:59Z), so the next fire is
        # 2024-11-04 01:00 EST = 06:00Z. BUG: returned None (the job never fired again).
        ("0-59 1 * * *", "America/New_York", U(2024, 11, 3, 6, 0), U(2024, 11, 4, 6, 0)),
        ("0-55/5 1 * * *", "America/New_York", U(2024, 11, 3, 6, 0), U(2024, 11, 4, 6, 0)),
        # Control: at the end of the second pass only one past fire is left to step over.
        ("0-59 1 * * *", "America/New_York", U(2024, 11, 3, 6, 59, 59), U(2024, 11, 4, 6, 0)),
        # Berlin, 2024-10-27: 01:00Z is 02:00 CET (second pass); next 2024-10-28 02:00 CET.
        ("0-59 2 * * *", "Europe/Berlin", U(2024, 10, 27, 1, 0), U(2024, 10, 28, 1, 0)),
        # Lord Howe goes back half an hour (02:00 LHDT -> 01:30 LHST) at 2024-04-06 15:00Z.
        # 15:10Z is 01:40 LHST (second pass); 01:45-01:55 fired in the first pass, so the
        # next fire is 02:00 LHST = 15:30Z, right after the repeated half hour.
        ("0-55/5 1,2 * * *", "Australia/Lord_Howe", U(2024, 4, 6, 15, 10), U(2024, 4, 6, 15, 30)),
    ],
)
def test_next_fire_after_steps_past_a_whole_repeated_hour_of_fires(expression, tz, after, expected):
    assert next_fire_after(cron(expression, tz), after) == expected


def test_validate_accepts_a_start_in_the_second_pass_of_a_repeated_hour_full_of_fires():
    # BUG: next_fire_after(start_at) was None, so this was refused as "never fires" (and a
    # job created, edited or resumed in that hour got next_run_at = NULL).
    schedule = cron("0-59 1 * * *", "America/New_York", start_at=U(2024, 11, 3, 6, 30))
    assert next_fire_after(schedule, U(2024, 11, 3, 6, 30)) == U(2024, 11, 4, 6, 0)


# --------------------------------------------------------------------------------------
# 2. Nicknames and normalisation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nickname", "expanded"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@DAILY", "0 0 * * *"),
        ("  @hourly  ", "0 * * * *"),
    ],
)
def test_normalize_cron_expands_nicknames(nickname, expanded):
    assert normalize_cron(nickname) == expanded
    assert validate(Schedule(cron=nickname)).cron == expanded


@pytest.mark.parametrize("nickname", ["@fortnightly", "@reboot", "@", "@every 5m"])
def test_normalize_cron_rejects_unknown_nicknames(nickname):
    with pytest.raises(InvalidSchedule) as info:
        normalize_cron(nickname)
    assert info.value.field == "cron"


def test_normalize_cron_collapses_whitespace():
    assert normalize_cron("  0\t9  *   * 1-5 ") == "0 9 * * 1-5"


def test_next_fire_after_nickname_fires_like_its_expansion():
    assert next_fire_after(cron("@weekly"), U(2024, 1, 1)) == U(2024, 1, 7)  # Sunday
    assert next_fire_after(cron("@yearly"), U(2024, 1, 1)) == U(2025, 1, 1)


# --------------------------------------------------------------------------------------
# 3. Intervals, start/end windows, one-offs
# --------------------------------------------------------------------------------------

ANCHOR = U(2024, 1, 1, 0, 0)


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (U(2023, 12, 31, 23, 0), ANCHOR),  # before the anchor: the anchor itself
        (ANCHOR - US, ANCHOR),
        (ANCHOR, U(2024, 1, 1, 0, 10)),  # strictly after
        (U(2024, 1, 1, 0, 7), U(2024, 1, 1, 0, 10)),
        (U(2024, 1, 1, 0, 10), U(2024, 1, 1, 0, 20)),
        (U(2024, 1, 1, 0, 19, 59, 999999), U(2024, 1, 1, 0, 20)),
        (U(2025, 7, 4, 13, 33, 21), U(2025, 7, 4, 13, 40)),
    ],
)
def test_next_fire_after_interval_is_anchored(after, expected):
    schedule = validate(Schedule(every=600, anchor=ANCHOR))
    assert next_fire_after(schedule, after) == expected


@pytest.mark.parametrize("every", [1, 7, 600, 86400, 7 * 86400 + 13])
def test_preview_interval_does_not_drift_over_many_steps(every):
    schedule = validate(Schedule(every=every, anchor=ANCHOR))
    fires = preview(schedule, ANCHOR - US, 2000)
    assert fires == [ANCHOR + timedelta(seconds=k * every) for k in range(2000)]
    # Jumping far ahead (about 90 years at most) lands on the same grid.
    steps = min(1_000_003, 2_900_000_000 // every)
    far = ANCHOR + timedelta(seconds=steps * every + every // 2)
    assert next_fire_after(schedule, far) == ANCHOR + timedelta(seconds=(steps + 1) * every)


def test_next_fire_after_interval_ignores_job_zone_and_dst():
    # Intervals count real seconds: 24 h apart across New York's spring-forward.
    schedule = validate(Schedule(every=86400, anchor=U(2024, 3, 9, 12), timezone="America/New_York"))
    assert preview(schedule, U(2024, 3, 9), 3) == [U(2024, 3, 9, 12), U(2024, 3, 10, 12), U(2024, 3, 11, 12)]


@pytest.mark.parametrize(
    "anchor",
    [
        # 2024-03-09 12:00 in New York = 17:00Z, 24 real hours apart -> 2024-03-10 17:00Z etc.
        datetime(2024, 3, 9, 12, tzinfo=ZoneInfo("America/New_York")),
        datetime(2024, 3, 9, 12, tzinfo=timezone(timedelta(hours=-5))),
    ],
    ids=["zoneinfo", "fixed-offset"],
)
def test_next_fire_after_interval_with_zoned_anchor_counts_real_seconds_in_utc(anchor):
    # BUG: validate() accepts any aware anchor, but the interval arithmetic adds timedeltas
    # in the anchor's own tzinfo. With a ZoneInfo anchor that is wall-clock arithmetic
    # (2024-03-10 12:00 EDT = 16:00Z, only 23 h after the anchor), and with any non-UTC
    # anchor the results are not in UTC as the module promises ("Datetimes ... out are
    # ... in UTC").
    schedule = validate(Schedule(every=86400, anchor=anchor))
    fires = preview(schedule, U(2024, 3, 9), 3)
    assert fires == [U(2024, 3, 9, 17), U(2024, 3, 10, 17), U(2024, 3, 11, 17)]
    assert all(fire.tzinfo is UTC for fire in fires)


def test_next_fire_after_interval_with_distant_anchor_does_not_skip_a_fire():
    # BUG (low severity): the step count is computed with float division. For offsets over
    # ~285 years the float cannot hold microseconds, so `after` = T - 1us rounds up to T,
    # floor()+1 overshoots by one step, and the `while candidate <= after` correction only
    # fixes undershoot. Expected 2024-01-01 00:00:00Z, got 00:00:01Z.
    schedule = validate(Schedule(every=1, anchor=U(1, 1, 1)))
    assert next_fire_after(schedule, U(2024, 1, 1) - US) == U(2024, 1, 1)


@pytest.mark.parametrize(
    ("schedule", "after", "expected"),
    [
        # Cron window: both ends inclusive.
        (
            Schedule(cron="0 * * * *", start_at=U(2024, 1, 1, 5), end_at=U(2024, 1, 1, 8)),
            U(2024, 1, 1),
            [U(2024, 1, 1, 5), U(2024, 1, 1, 6), U(2024, 1, 1, 7), U(2024, 1, 1, 8)],
        ),
        # start_at between fires: the first fire after it.
        (
            Schedule(cron="0 * * * *", start_at=U(2024, 1, 1, 5, 30), end_at=U(2024, 1, 1, 7, 59)),
            U(2024, 1, 1),
            [U(2024, 1, 1, 6), U(2024, 1, 1, 7)],
        ),
        # Interval with only start_at: counts from start_at, end_at inclusive.
        (
            Schedule(every=3600, start_at=U(2024, 1, 1, 5, 30), end_at=U(2024, 1, 1, 7, 30)),
            U(2024, 1, 1),
            [U(2024, 1, 1, 5, 30), U(2024, 1, 1, 6, 30), U(2024, 1, 1, 7, 30)],
        ),
        # Interval anchored earlier than start_at... and `after` beyond start_at.
        (
            Schedule(every=3600, start_at=U(2024, 1, 1, 5, 30), end_at=U(2024, 1, 1, 7, 30)),
            U(2024, 1, 1, 6),
            [U(2024, 1, 1, 6, 30), U(2024, 1, 1, 7, 30)],
        ),
        # One-off inside the window.
        (
            Schedule(at=U(2024, 6, 1, 12), start_at=U(2024, 6, 1), end_at=U(2024, 6, 2)),
            U(2024, 1, 1),
            [U(2024, 6, 1, 12)],
        ),
        # One-off before start_at / after end_at: never fires.
        (Schedule(at=U(2024, 6, 1, 12), start_at=U(2024, 6, 1, 13)), U(2024, 1, 1), []),
        (Schedule(at=U(2024, 6, 1, 12), end_at=U(2024, 6, 1, 11)), U(2024, 1, 1), []),
        # Cron window entirely passed.
        (Schedule(cron="0 * * * *", end_at=U(2024, 1, 1, 8)), U(2024, 1, 1, 8), []),
    ],
)
def test_preview_respects_start_and_end_window(schedule, after, expected):
    assert preview(validate(schedule), after, 10) == expected


@pytest.mark.parametrize(
    "at",
    [U(2024, 6, 1, 12), datetime(2024, 6, 1, 14, tzinfo=timezone(timedelta(hours=2)))],
    ids=["utc", "offset"],
)
def test_next_fire_after_one_off_fires_once_then_none(at):
    schedule = validate(Schedule(at=at))
    first = next_fire_after(schedule, U(2024, 6, 1))
    assert first == U(2024, 6, 1, 12)
    assert first.tzinfo is UTC
    assert next_fire_after(schedule, first) is None
    assert next_fire_after(schedule, U(2024, 6, 1, 12) - US) == U(2024, 6, 1, 12)
    assert preview(schedule, U(2024, 1, 1), 5) == [U(2024, 6, 1, 12)]


# --------------------------------------------------------------------------------------
# 4. last_fire_at_or_before
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "at", "expected"),
    [
        (Schedule(cron="*/15 * * * *"), U(2024, 1, 1, 12, 14, 59, 999999), U(2024, 1, 1, 12, 0)),
        (Schedule(cron="*/15 * * * *"), U(2024, 1, 1, 12, 15), U(2024, 1, 1, 12, 15)),  # exact instant
        (Schedule(cron="*/15 * * * *"), U(2024, 1, 1, 12, 15, 0, 1), U(2024, 1, 1, 12, 15)),
        (Schedule(cron="0 0 29 2 *"), U(2027, 6, 1), U(2024, 2, 29)),
        # Window: end_at clamps, start_at cuts off.
        (Schedule(cron="0 * * * *", end_at=U(2024, 1, 1, 8, 30)), U(2024, 1, 2), U(2024, 1, 1, 8)),
        (Schedule(cron="0 * * * *", start_at=U(2024, 1, 1, 8, 30)), U(2024, 1, 1, 8, 45), None),
        (Schedule(cron="0 * * * *", start_at=U(2024, 1, 1, 9)), U(2024, 1, 1, 9), U(2024, 1, 1, 9)),
        # Interval.
        (Schedule(every=600, anchor=ANCHOR), U(2024, 1, 1, 0, 20), U(2024, 1, 1, 0, 20)),  # exact
        (Schedule(every=600, anchor=ANCHOR), U(2024, 1, 1, 0, 29, 59), U(2024, 1, 1, 0, 20)),
        (Schedule(every=600, anchor=ANCHOR), ANCHOR, ANCHOR),
        (Schedule(every=600, anchor=ANCHOR), ANCHOR - US, None),
        (Schedule(every=600, anchor=ANCHOR, end_at=U(2024, 1, 1, 0, 35)), U(2024, 2, 1), U(2024, 1, 1, 0, 30)),
        # One-off.
        (Schedule(at=U(2024, 6, 1, 12)), U(2024, 6, 1, 12), U(2024, 6, 1, 12)),  # exact
        (Schedule(at=U(2024, 6, 1, 12)), U(2024, 6, 1, 12) - US, None),
        (Schedule(at=U(2024, 6, 1, 12)), U(2030, 1, 1), U(2024, 6, 1, 12)),
        # DST: the fire right after the New York gap (03:00 EDT = 07:00Z), exactly and just before.
        (Schedule(cron="30 2 * * *", timezone="America/New_York"), U(2024, 3, 10, 7), U(2024, 3, 10, 7)),
        (Schedule(cron="30 2 * * *", timezone="America/New_York"), U(2024, 3, 10, 6, 59, 59), U(2024, 3, 9, 7, 30)),
        # Berlin autumn: after the whole repeated hour, the single 02:30 CEST fire (00:30Z).
        (Schedule(cron="30 2 * * *", timezone="Europe/Berlin"), U(2024, 10, 27, 2), U(2024, 10, 27, 0, 30)),
        # Hourly in the repeated hour: 02:00 CET (second pass) = 01:00Z, exact.
        (Schedule(cron="0 * * * *", timezone="Europe/Berlin"), U(2024, 10, 27, 1), U(2024, 10, 27, 1)),
    ],
)
def test_last_fire_at_or_before_finds_latest_fire_including_exact_instant(schedule, at, expected):
    result = last_fire_at_or_before(validate(schedule), at)
    assert result == expected
    if result is not None:
        assert result.tzinfo is UTC


@pytest.mark.parametrize(
    ("expression", "tz", "at", "expected"),
    [
        # Control: first pass (01:40 EDT = 05:40Z) -> 01:30 EDT = 05:30Z.
        ("30 1 * * *", "America/New_York", U(2024, 11, 3, 5, 40), U(2024, 11, 3, 5, 30)),
        # BUG: second pass, 01:10 EST = 06:10Z. The fire at 01:30 EDT (05:30Z) is 40 minutes
        # earlier, but schedules.py returns the previous day's 2024-11-02 05:30Z.
        ("30 1 * * *", "America/New_York", U(2024, 11, 3, 6, 10), U(2024, 11, 3, 5, 30)),
        # BUG, Berlin: 02:10 CET = 01:10Z; the 02:30 CEST fire was at 00:30Z; returns
        # 2024-10-26 00:30Z.
        ("30 2 * * *", "Europe/Berlin", U(2024, 10, 27, 1, 10), U(2024, 10, 27, 0, 30)),
    ],
)
def test_last_fire_at_or_before_in_second_pass_of_repeated_hour_finds_first_pass_fire(expression, tz, at, expected):
    assert last_fire_at_or_before(cron(expression, tz), at) == expected


def test_last_fire_at_or_before_sees_fires_in_a_45_minute_hour():
    # Pacific/Chatham springs forward 2022-09-25 02:45 CHAST (+12:45) -> 03:45 CHADT, so
    # local hour 2 lasts 45 minutes: "*/10 2 * * *" fires 02:00..02:40 CHAST =
    # 2022-09-24 13:15Z .. 13:55Z (next_fire_after agrees).
    schedule = cron("*/10 2 * * *", "Pacific/Chatham")
    at = U(2022, 9, 24, 14, 8)  # 03:53 CHADT
    forward = fires_between(schedule, U(2022, 9, 24, 13), at + US)
    assert forward[-1] == U(2022, 9, 24, 13, 55)
    # BUG: last_fire_at_or_before skips the short hour and returns 2022-09-23 14:05Z.
    assert last_fire_at_or_before(schedule, at) == U(2022, 9, 24, 13, 55)


def test_last_fire_at_or_before_terminates_around_chatham_fall_back():
    # Pacific/Chatham falls back 2022-04-03 03:45 CHADT (+13:45) -> 02:45 CHAST (+12:45) at
    # 2022-04-02 14:00Z. "0 */2 * * *" fires at 02:00 CHADT = 12:15Z, then 04:00 CHAST = 15:15Z.
    # BUG: for any `at` from 13:30Z to 15:14Z (local hour 3, around the repeated 45 minutes),
    # last_fire_at_or_before never returns (cronsim's reverse iteration loops forever).
    # plan_fires calls it for any late job, so the beat would hang.
    schedule = cron("0 */2 * * *", "Pacific/Chatham")
    assert next_fire_after(schedule, U(2022, 4, 2, 14, 25)) == U(2022, 4, 2, 15, 15)
    with deadline(2):
        assert last_fire_at_or_before(schedule, U(2022, 4, 2, 14, 25)) == U(2022, 4, 2, 12, 15)


# --------------------------------------------------------------------------------------
# 5. preview
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule(cron="*/7 * * * *"),
        Schedule(cron="0 9 * * 1-5", timezone="Europe/Berlin"),
        Schedule(cron="0 * * * *", timezone="America/New_York"),
        Schedule(every=45, anchor=ANCHOR),
    ],
)
@pytest.mark.parametrize("count", [0, 1, 5, 50])
def test_preview_returns_count_increasing_times(schedule, count):
    fires = preview(validate(schedule), U(2024, 10, 26), count)
    assert len(fires) == count
    assert all(a < b for a, b in zip(fires, fires[1:]))
    assert all(f > U(2024, 10, 26) and f.tzinfo is UTC for f in fires)


@pytest.mark.parametrize(
    ("schedule", "expected_count"),
    [
        (Schedule(cron="0 * * * *", end_at=U(2024, 1, 1, 3)), 3),  # 01:00, 02:00, 03:00
        (Schedule(every=3600, anchor=ANCHOR, end_at=U(2024, 1, 1, 3, 59)), 3),
        (Schedule(at=U(2024, 1, 1, 5)), 1),
        (Schedule(at=U(2023, 1, 1)), 0),
    ],
)
def test_preview_returns_fewer_when_schedule_ends(schedule, expected_count):
    assert len(preview(validate(schedule), U(2024, 1, 1, 0, 30), 10)) == expected_count


# --------------------------------------------------------------------------------------
# 6. Validation: bad input names the field
# --------------------------------------------------------------------------------------

NAIVE = datetime(2024, 1, 1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "0 0 31 2 *"}, "cron"),  # 31 February never exists
        ({"cron": "0 0 30 2 *"}, "cron"),  # nor does the 30th
        ({"cron": "0 0 31 4,6,9,11 *"}, "cron"),
        ({"cron": "* * * * * *"}, "cron"),  # six fields (seconds) not accepted
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "0 0 * * é"}, "cron"),
        ({"cron": "０ ０ * * *"}, "cron"),  # full-width digits
        ({"cron": "0 0 * * *\x00"}, "cron"),
        ({"cron": "0 0 * * *\u200b"}, "cron"),  # zero-width space
        ({"cron": "   "}, "cron"),
        ({"cron": "0 25 * * *"}, "cron"),
        ({"cron": "60 0 * * *"}, "cron"),
        ({"cron": "*/0 * * * *"}, "cron"),
        ({"cron": "5-1 * * * *"}, "cron"),
        ({"cron": "0 0 0 * *"}, "cron"),
        ({"cron": "0 0 * 13 *"}, "cron"),
        ({"cron": "0 0 * * 1#6"}, "cron"),
        ({"cron": "a b c d e"}, "cron"),
        ({"cron": "0 " * 150}, "cron"),  # too long
        ({"cron": "0 0 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "0 0 * * *", "timezone": ""}, "timezone"),
        ({"cron": "0 0 * * *", "timezone": "../etc/passwd"}, "timezone"),
        ({"cron": "0 0 * * *", "timezone": "/etc/localtime"}, "timezone"),
        ({"cron": "0 0 * * *", "timezone": "Europe/Zürich"}, "timezone"),
        ({"cron": "0 0 * * *", "timezone": "Europe/Berlin\n"}, "timezone"),
        ({"cron": "0 0 * * *", "timezone": None}, "timezone"),
        ({"every": 0, "anchor": ANCHOR}, "every"),
        ({"every": -1, "anchor": ANCHOR}, "every"),
        ({"every": True, "anchor": ANCHOR}, "every"),
        ({"every": 1.5, "anchor": ANCHOR}, "every"),
        ({"every": 60.0, "anchor": ANCHOR}, "every"),
        ({"every": "10", "anchor": ANCHOR}, "every"),
        ({"every": 10 * 366 * 86400 + 1, "anchor": ANCHOR}, "every"),
        ({"every": 60}, "anchor"),  # an interval needs something to count from
        ({"at": NAIVE}, "at"),
        ({"cron": "0 0 * * *", "start_at": NAIVE}, "start_at"),
        ({"cron": "0 0 * * *", "end_at": NAIVE}, "end_at"),
        ({"every": 60, "anchor": NAIVE}, "anchor"),
        ({"cron": "0 0 * * *", "start_at": U(2024, 2, 1), "end_at": U(2024, 1, 31)}, "end_at"),
        ({}, "schedule"),
        ({"cron": "0 0 * * *", "every": 60, "anchor": ANCHOR}, "schedule"),
        ({"cron": "0 0 * * *", "at": U(2024, 1, 1)}, "schedule"),
        ({"every": 60, "anchor": ANCHOR, "at": U(2024, 1, 1)}, "schedule"),
        ({"at": datetime(9999, 1, 1, tzinfo=UTC)}, "at"),
        ({"cron": "0 0 * * *", "start_at": datetime(9999, 1, 1, tzinfo=UTC)}, "start_at"),
    ],
)
def test_validate_rejects_bad_input_naming_the_field(kwargs, field):
    with pytest.raises(InvalidSchedule) as info:
        validate(Schedule(**kwargs))
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    "name",
    [
        # BUG: these are directories in the tz database; ZoneInfo raises IsADirectoryError,
        # which zone() does not catch, so validate() crashes instead of raising
        # InvalidSchedule(field="timezone").
        "America",
        "Etc",
        "America/Argentina",
        # BUG: a 300-character name raises OSError(ENAMETOOLONG), also uncaught.
        "A" * 300,
    ],
    ids=["America", "Etc", "America-Argentina", "too-long"],
)
def test_zone_rejects_names_that_are_not_zones_with_invalid_schedule(name):
    with pytest.raises(InvalidSchedule) as info:
        zone(name)
    assert info.value.field == "timezone"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        # BUG: ZoneInfo opens these files of the tz folder too, so they were accepted: the
        # machine's own zone, tzdata internals, and copies of every zone (right/ is 27 s off).
        ("localtime", "unknown time zone 'localtime'"),
        ("posixrules", "unknown time zone 'posixrules'"),
        ("Factory", "unknown time zone 'Factory'"),
        ("right/UTC", "unknown time zone 'right/UTC'"),
        ("posix/Europe/Berlin", "unknown time zone 'posix/Europe/Berlin'; did you mean Europe/Berlin?"),
        # BUG: refused without a hint (and "europe/berlin" accepted on a case-insensitive disk).
        ("europe/berlin", "unknown time zone 'europe/berlin'; did you mean Europe/Berlin?"),
        ("Europe/Berlin ", "unknown time zone 'Europe/Berlin '; did you mean Europe/Berlin?"),
        ("Europe/Berlim", "unknown time zone 'Europe/Berlim'; did you mean Europe/Berlin?"),
        ("utc", "unknown time zone 'utc'; did you mean UTC?"),
        ("America/Sao Paulo", "unknown time zone 'America/Sao Paulo'; did you mean America/Sao_Paulo?"),
        # Control: nothing close enough to suggest.
        ("Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_zone_takes_only_exact_iana_names_and_suggests_the_one_meant(name, message):
    with pytest.raises(InvalidSchedule) as info:
        validate(Schedule(cron="0 0 * * *", timezone=name))
    assert info.value.field == "timezone"
    assert str(info.value) == f"timezone: {message}"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cron": "0 0 29 2 *"},  # leap day: rare but real
        {"cron": "0 0 * * *", "timezone": "Etc/UTC"},
        {"cron": "0 0 * * *", "timezone": "America/Argentina/Buenos_Aires"},
        {"cron": "0 0 L * *"},
        {"cron": "0 0 30 2 1"},  # day-of-week OR: Mondays in February
        {"cron": "0 9 * * MON-FRI", "timezone": "Australia/Lord_Howe"},
        {"cron": "0 0 1 1 *", "start_at": U(2024, 1, 2), "end_at": U(2024, 12, 31)},  # empty window is allowed
        {"every": 10 * 366 * 86400, "anchor": ANCHOR},
        {"every": 1, "start_at": ANCHOR},
        {"at": datetime(8999, 12, 31, tzinfo=UTC)},
    ],
)
def test_validate_accepts_valid_schedules(kwargs):
    validate(Schedule(**kwargs))


# --------------------------------------------------------------------------------------
# 7. Property: next_fire_after is strictly increasing for any valid cron, zone and instant
# --------------------------------------------------------------------------------------

PROPERTY_ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "Asia/Kathmandu",  # +05:45, no DST
    "America/Santiago",  # DST changes at midnight
    "Pacific/Auckland",
    "Asia/Tokyo",
]


def _transitions(tz_name: str) -> list[datetime]:
    """UTC instants (to the minute) where the zone's offset changes, 2020-2030."""
    tz = ZoneInfo(tz_name)
    found = []
    day = U(2020, 1, 1)
    while day < U(2030, 1, 1):
        nxt = day + timedelta(days=1)
        if day.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            low, high = day, nxt
            while high - low > timedelta(minutes=1):
                mid = low + (high - low) / 2
                if mid.astimezone(tz).utcoffset() == day.astimezone(tz).utcoffset():
                    low = mid
                else:
                    high = mid
            found.append(high.replace(second=0, microsecond=0))
        day = nxt
    return found


TRANSITIONS = sorted({t for name in PROPERTY_ZONES for t in _transitions(name)})


def _field(low: int, high: int):
    value = st.integers(low, high)
    span = high - low

    @st.composite
    def ranged(draw):
        a = draw(value)
        b = draw(st.integers(a, high))
        return f"{a}-{b}"

    return st.one_of(
        st.just("*"),
        value.map(str),
        st.lists(value, min_size=2, max_size=4, unique=True).map(lambda xs: ",".join(map(str, sorted(xs)))),
        ranged(),
        st.tuples(ranged(), st.integers(1, max(span, 1))).map(lambda t: f"{t[0]}/{t[1]}"),
        st.integers(1, max(span, 1)).map(lambda k: f"*/{k}"),
    )


# Hours are biased towards 0-3, where DST changes happen.
CRON_EXPRESSIONS = st.tuples(
    _field(0, 59),
    st.one_of(st.integers(0, 3).map(str), _field(0, 3), _field(0, 23)),
    st.one_of(st.just("*"), _field(1, 28)),
    st.one_of(st.just("*"), _field(1, 12)),
    st.one_of(st.just("*"), _field(0, 6)),
).map(" ".join)

INSTANTS = st.one_of(
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)),
    st.tuples(st.sampled_from(TRANSITIONS), st.integers(-3 * 3600, 3 * 3600), st.integers(0, 999999)).map(
        lambda t: t[0] + timedelta(seconds=t[1], microseconds=t[2])
    ),
)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(expression=CRON_EXPRESSIONS, tz=st.sampled_from(PROPERTY_ZONES), after=INSTANTS)
# Known failure (second pass of the New York repeated hour), kept so it is always checked.
@example(expression="30 1 * * *", tz="America/New_York", after=U(2024, 11, 3, 6, 10))
def test_next_fire_after_is_strictly_increasing_utc_for_any_cron(expression, tz, after):
    schedule = validate(Schedule(cron=expression, timezone=tz))
    current = after
    with deadline(5):
        for _ in range(30):
            nxt = next_fire_after(schedule, current)
            assert nxt is not None
            assert nxt > current, f"{expression!r} in {tz}: next after {current} is {nxt}"
            assert nxt.tzinfo is UTC
            current = nxt


# --------------------------------------------------------------------------------------
# 8. plan_fires
# --------------------------------------------------------------------------------------

EVERY_10 = Schedule(cron="*/10 * * * *")
GRACE = timedelta(seconds=60)


def rules(policy=MisfirePolicy.RUN_ONCE, **kwargs) -> MisfireRules:
    return MisfireRules(policy=policy, grace=GRACE, **kwargs)


def ten_minutes(start: datetime, end: datetime) -> list[datetime]:
    """Every :x0 instant in [start, end]."""
    return [start + timedelta(minutes=10 * k) for k in range(int((end - start) / timedelta(minutes=10)) + 1)]


def assert_accounts_for_every_fire(schedule: Schedule, due_at: datetime, plan: Plan) -> None:
    """Every fire in [due_at, next_run_at) is in fires+skipped exactly once (fires older than
    the catch-up window collapse into the single outside-window record at due_at)."""
    end = plan.next_run_at or U(9000, 1, 1)
    expected = fires_between(schedule, due_at, end)
    outside = [t for t, reason in plan.skipped if reason.startswith(SkipReason.OUTSIDE_CATCHUP_WINDOW)]
    assert len(outside) <= 1
    recorded = plan.fires + [t for t, reason in plan.skipped if not reason.startswith("outside")]
    assert len(recorded) == len(set(recorded))
    if outside:
        assert outside == [due_at]
        collapsed = [t for t in expected if t < min(recorded, default=end)]
        assert collapsed and collapsed[0] == due_at
        expected = expected[len(collapsed) :]
    assert sorted(recorded) == expected


@pytest.mark.parametrize("policy", list(MisfirePolicy))
@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=1), GRACE])
def test_plan_fires_runs_on_time_fire(policy, late):
    plan = plan_fires(EVERY_10, U(2024, 5, 1, 12), U(2024, 5, 1, 12) + late, rules(policy))
    assert plan == Plan(fires=[U(2024, 5, 1, 12)], skipped=[], next_run_at=U(2024, 5, 1, 12, 10))


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_plan_fires_with_no_fire_before_the_catchup_window_skips_nothing_there(policy):
    """A due time before the schedule's start (moved later since): no fire lies before the
    catch-up window, so nothing is skipped as outside it, and planning starts at the start."""
    schedule = Schedule(cron="*/10 * * * *", start_at=U(2024, 5, 1, 12, 40))
    plan = plan_fires(
        schedule, U(2024, 5, 1, 11), U(2024, 5, 1, 13), rules(policy, catchup_window=timedelta(minutes=30))
    )

    assert not [at for at, reason in plan.skipped if reason.startswith(SkipReason.OUTSIDE_CATCHUP_WINDOW)]
    assert min(plan.fires + [at for at, _ in plan.skipped]) == U(2024, 5, 1, 12, 40)
    assert U(2024, 5, 1, 13) in plan.fires  # on time


def test_plan_fires_treats_fire_just_past_grace_as_missed():
    now = U(2024, 5, 1, 12) + GRACE + US
    assert plan_fires(EVERY_10, U(2024, 5, 1, 12), now, rules(MisfirePolicy.SKIP)).skipped == [
        (U(2024, 5, 1, 12), "misfire_skip")
    ]
    # run_once still runs the single missed fire (it is the latest).
    assert plan_fires(EVERY_10, U(2024, 5, 1, 12), now, rules()).fires == [U(2024, 5, 1, 12)]


def test_plan_fires_run_once_coalesces_missed_fires_into_the_latest():
    # Beat down from 10:00 to 11:55: fires 10:00..11:50 missed, none on time.
    due, now = U(2024, 5, 1, 10), U(2024, 5, 1, 11, 55)
    plan = plan_fires(EVERY_10, due, now, rules())
    assert plan.fires == [U(2024, 5, 1, 11, 50)]
    assert plan.skipped == [(t, "coalesced") for t in ten_minutes(due, U(2024, 5, 1, 11, 40))]
    assert plan.next_run_at == U(2024, 5, 1, 12)
    assert_accounts_for_every_fire(EVERY_10, due, plan)


def test_plan_fires_run_once_coalesces_all_missed_when_an_on_time_fire_exists():
    due, now = U(2024, 5, 1, 10), U(2024, 5, 1, 12, 0, 30)
    plan = plan_fires(EVERY_10, due, now, rules())
    assert plan.fires == [U(2024, 5, 1, 12)]
    assert plan.skipped == [(t, "coalesced") for t in ten_minutes(due, U(2024, 5, 1, 11, 50))]
    assert plan.next_run_at == U(2024, 5, 1, 12, 10)
    assert_accounts_for_every_fire(EVERY_10, due, plan)


@pytest.mark.parametrize(
    ("now", "runs"),
    [
        (U(2024, 5, 1, 11, 55), ten_minutes(U(2024, 5, 1, 11, 30), U(2024, 5, 1, 11, 50))),
        # The on-time 12:00 fire runs in addition to the capped missed ones.
        (U(2024, 5, 1, 12, 0, 30), ten_minutes(U(2024, 5, 1, 11, 30), U(2024, 5, 1, 12))),
    ],
)
def test_plan_fires_run_all_runs_latest_cap_missed_and_skips_older(now, runs):
    due = U(2024, 5, 1, 10)
    plan = plan_fires(EVERY_10, due, now, rules(MisfirePolicy.RUN_ALL, run_all_cap=3))
    assert plan.fires == runs
    assert plan.skipped == [(t, "run_all_cap") for t in ten_minutes(due, U(2024, 5, 1, 11, 20))]
    assert_accounts_for_every_fire(EVERY_10, due, plan)


def test_plan_fires_run_all_under_cap_runs_every_missed_fire():
    due, now = U(2024, 5, 1, 10), U(2024, 5, 1, 11, 55)
    plan = plan_fires(EVERY_10, due, now, rules(MisfirePolicy.RUN_ALL, run_all_cap=100))
    assert plan.fires == ten_minutes(due, U(2024, 5, 1, 11, 50))
    assert plan.skipped == []


def test_plan_fires_skip_records_missed_and_runs_only_on_time():
    due, now = U(2024, 5, 1, 10), U(2024, 5, 1, 12, 0, 30)
    plan = plan_fires(EVERY_10, due, now, rules(MisfirePolicy.SKIP))
    assert plan.fires == [U(2024, 5, 1, 12)]
    assert plan.skipped == [(t, "misfire_skip") for t in ten_minutes(due, U(2024, 5, 1, 11, 50))]
    assert plan.next_run_at == U(2024, 5, 1, 12, 10)


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_plan_fires_collapses_fires_older_than_catchup_window_into_one_record(policy):
    # Down for 3.5 days; window 1 day -> window starts 2024-04-30 12:00:30.
    due, now = U(2024, 4, 28), U(2024, 5, 1, 12, 0, 30)
    plan = plan_fires(EVERY_10, due, now, rules(policy, catchup_window=timedelta(days=1), run_all_cap=3))
    outside = [(t, r) for t, r in plan.skipped if r.startswith("outside_catchup_window")]
    assert outside == [(due, "outside_catchup_window: missed fires up to 2024-04-30T12:00:00+00:00")]
    assert plan.skipped[0] == outside[0]
    # Everything else starts at the first fire inside the window.
    rest = sorted(plan.fires + [t for t, r in plan.skipped[1:]])
    assert rest == ten_minutes(U(2024, 4, 30, 12, 10), U(2024, 5, 1, 12))
    assert U(2024, 5, 1, 12) in plan.fires  # the on-time fire always runs
    assert plan.next_run_at == U(2024, 5, 1, 12, 10)
    assert_accounts_for_every_fire(EVERY_10, due, plan)


def test_plan_fires_one_off_missed_beyond_catchup_window_is_skipped_once():
    once = validate(Schedule(at=U(2024, 5, 1, 11)))
    plan = plan_fires(once, U(2024, 5, 1, 11), U(2024, 5, 3), rules())
    assert plan.fires == []
    assert len(plan.skipped) == 1 and plan.skipped[0][1].startswith("outside_catchup_window")
    assert plan.next_run_at is None


def test_plan_fires_one_off_on_time_runs_and_leaves_nothing():
    once = validate(Schedule(at=U(2024, 5, 1, 11)))
    assert plan_fires(once, U(2024, 5, 1, 11), U(2024, 5, 1, 11, 0, 5), rules()) == Plan(
        fires=[U(2024, 5, 1, 11)], skipped=[], next_run_at=None
    )


def test_plan_fires_last_fire_before_end_at_leaves_nothing():
    schedule = validate(Schedule(cron="0 * * * *", end_at=U(2024, 5, 1, 12, 30)))
    plan = plan_fires(schedule, U(2024, 5, 1, 12), U(2024, 5, 1, 12, 0, 1), rules())
    assert plan == Plan(fires=[U(2024, 5, 1, 12)], skipped=[], next_run_at=None)


@pytest.mark.parametrize("policy", list(MisfirePolicy))
@pytest.mark.parametrize("limit", [1, 3, 7, 1000])
@pytest.mark.parametrize("due", [U(2024, 5, 1, 10), U(2024, 4, 29)], ids=["in-window", "outside-window"])
def test_plan_fires_limit_bounds_work_and_repeated_calls_account_for_every_fire_once(policy, limit, due):
    now = U(2024, 5, 1, 12, 0, 30)
    rule = rules(policy, catchup_window=timedelta(hours=6), run_all_cap=4, limit=limit)
    entries: list[tuple[datetime, str]] = []
    cursor = due
    for _ in range(500):
        plan = plan_fires(EVERY_10, cursor, now, rule)
        assert len(plan.fires) + len(plan.skipped) <= limit
        assert_accounts_for_every_fire(EVERY_10, cursor, plan)
        entries += [(t, "run") for t in plan.fires] + plan.skipped
        cursor = plan.next_run_at
        if cursor > now:
            break
        # More remains: next_run_at stays in the past so the job is claimed again.
        assert cursor <= now
    assert cursor == U(2024, 5, 1, 12, 10)
    times = [t for t, _ in entries]
    assert len(times) == len(set(times))
    runs = [t for t, r in entries if r == "run"]
    window_start = now - timedelta(hours=6)  # 06:00:30; its first fire is 06:10
    start_inside = max(due, U(2024, 5, 1, 6, 10))
    assert sorted(t for t in times if t >= window_start) == ten_minutes(start_inside, U(2024, 5, 1, 12))
    older = [(t, r) for t, r in entries if t < window_start]
    if due < window_start:
        assert len(older) == 1
        assert older[0][0] == due and older[0][1].startswith("outside_catchup_window")
    else:
        assert older == []
    expected_runs = {
        MisfirePolicy.RUN_ONCE: [U(2024, 5, 1, 12)],
        MisfirePolicy.SKIP: [U(2024, 5, 1, 12)],
        # The latest 4 missed (11:20..11:50) plus the on-time 12:00.
        MisfirePolicy.RUN_ALL: ten_minutes(U(2024, 5, 1, 11, 20), U(2024, 5, 1, 12)),
    }[policy]
    assert sorted(runs) == expected_runs


def test_plan_fires_limit_keeps_next_run_at_in_the_past():
    now = U(2024, 5, 1, 12, 0, 30)
    plan = plan_fires(EVERY_10, U(2024, 5, 1, 10), now, rules(limit=5))
    assert len(plan.skipped) + len(plan.fires) == 5
    assert plan.next_run_at == U(2024, 5, 1, 10, 50)
    assert plan.next_run_at < now


CACHE_CASES = [
    (EVERY_10, U(2024, 5, 1, 10), U(2024, 5, 1, 12, 0, 30)),
    (EVERY_10, U(2024, 4, 28), U(2024, 5, 1, 12, 0, 30)),
    (Schedule(cron="0 * * * *", timezone="America/New_York"), U(2024, 11, 3, 3), U(2024, 11, 3, 9, 0, 30)),
    (Schedule(cron="30 2 * * *", timezone="Europe/Berlin"), U(2024, 3, 29, 1, 30), U(2024, 4, 1, 0, 30, 5)),
    (Schedule(every=90, anchor=ANCHOR), U(2024, 1, 1, 1), U(2024, 1, 1, 3)),
]


@pytest.mark.parametrize("policy", list(MisfirePolicy))
@pytest.mark.parametrize(("schedule", "due", "now"), CACHE_CASES)
def test_plan_fires_with_next_fire_cache_matches_uncached(policy, schedule, due, now):
    schedule = validate(schedule)
    rule = rules(policy, run_all_cap=5, limit=50)
    cache = NextFireCache()
    uncached = plan_fires(schedule, due, now, rule)
    assert plan_fires(schedule, due, now, rule, cache=cache) == uncached
    assert plan_fires(schedule, due, now, rule, cache=cache) == uncached  # warm cache
    # The same cache shared with another schedule does not leak results between them.
    other = validate(Schedule(cron="*/7 * * * *"))
    assert plan_fires(other, due, now, rule, cache=cache) == plan_fires(other, due, now, rule)
    assert_accounts_for_every_fire(schedule, due, uncached)


def test_plan_fires_with_zero_catchup_window_still_runs_on_time_fire():
    # BUG: the docstring says fires at most `grace` late "are on time and always run", and
    # services accept catchup_window_seconds=0. But with catchup_window < lateness the
    # on-time fire is collapsed into an "outside_catchup_window" record. A fire due at
    # 12:00:00 planned at 12:00:01 (normal beat latency) is skipped, so the job never runs.
    # Expected fires=[12:00], got fires=[] and
    # skipped=[(12:00, 'outside_catchup_window: missed fires up to 2024-05-01T12:00:00+00:00')].
    plan = plan_fires(EVERY_10, U(2024, 5, 1, 12), U(2024, 5, 1, 12, 0, 1), rules(catchup_window=timedelta(0)))
    assert plan.fires == [U(2024, 5, 1, 12)]
    assert plan.skipped == []


def test_plan_fires_run_once_runs_a_missed_fire_from_the_repeated_hour():
    # "30 1 * * *" in New York fired due at 01:30 EDT = 2024-11-03 05:30Z. The beat was
    # down and plans at 06:10Z (01:10 EST, second pass of the repeated hour): one missed
    # fire, so run_once runs it and the next is 2024-11-04 01:30 EST = 06:30Z.
    # BUG: last_fire_at_or_before(06:09Z) returns 2024-11-02 05:30Z, so the latest missed
    # fire is misidentified and the only missed fire is recorded as "coalesced": nothing runs.
    schedule = cron("30 1 * * *", "America/New_York")
    plan = plan_fires(schedule, U(2024, 11, 3, 5, 30), U(2024, 11, 3, 6, 10), rules())
    assert plan.fires == [U(2024, 11, 3, 5, 30)]
    assert plan.skipped == []
    assert plan.next_run_at == U(2024, 11, 4, 6, 30)
