"""services.beatfields: Celery's crontabs and intervals read as a job's schedule, with no
database (the import of rows and settings that uses them is in
tests/integration/services/test_importbeat.py, which also compares fires over two years)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery.schedules import crontab

from scheduler_app.services.beatfields import Untranslatable, cron_of, crontab_schedule, field_text, interval_seconds


@pytest.mark.parametrize(
    ("values", "low", "high", "expected"),
    [
        (range(60), 0, 59, "*"),
        (range(0, 60, 15), 0, 59, "*/15"),
        (range(1, 60, 2), 0, 59, "1-59/2"),
        ({0, 30}, 0, 59, "0,30"),
        (range(9, 18), 0, 23, "9-17"),
        ({1, 2, 5, 6, 7}, 0, 6, "1,2,5-7"),
        ({1, 4, 7, 10}, 1, 12, "*/3"),
    ],
)
def test_a_field_is_written_as_the_shortest_cron_text_selecting_the_same_values(values, low, high, expected):
    assert field_text(set(values), low, high) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (dict(minute="0", hour="3"), "0 3 * * *"),
        (dict(minute="30", hour="8", day_of_week="mon-fri"), "30 8 * * 1-5"),
        # Both day fields set: Celery needs both to match, so the first week's days and a weekday
        # are "the n-th weekday" in cron.
        (dict(minute="0", hour="9", day_of_month="1-7", day_of_week="mon"), "0 9 * * 1#1"),
        (dict(minute="0", hour="9", day_of_month="15-21", day_of_week="fri,sat"), "0 9 * * 5#3,6#3"),
    ],
)
def test_a_crontab_is_the_cron_expression_that_fires_when_celery_does(fields, expected):
    assert cron_of(crontab(**fields)) == expected


def test_day_fields_no_cron_expression_can_say_are_refused_with_the_reason():
    with pytest.raises(Untranslatable, match="day_of_month 1,15 and day_of_week 1 are both set"):
        cron_of(crontab(day_of_month="1,15", day_of_week="mon"))


def test_a_crontab_schedule_is_its_cron_expression_checked_in_its_zone():
    assert crontab_schedule(crontab(minute="0", hour="0", day_of_month="29", month_of_year="2"), "Europe/Paris") == (
        "0 0 29 2 *"
    )


@pytest.mark.parametrize(
    ("every", "expected"), [(timedelta(seconds=1), 1), (timedelta(minutes=5), 300), (timedelta(days=2), 172800)]
)
def test_an_interval_of_whole_seconds_is_kept(every, expected):
    assert interval_seconds(every) == expected


@pytest.mark.parametrize("every", [timedelta(milliseconds=500), timedelta(seconds=1.5), timedelta(0)])
def test_an_interval_not_of_whole_seconds_is_refused(every):
    with pytest.raises(Untranslatable, match="is not a whole number of seconds"):
        interval_seconds(every)
