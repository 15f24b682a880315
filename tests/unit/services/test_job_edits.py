"""The services behind the API, the part that needs no database: previews of a schedule (UTC
and local times, DST anomalies flagged, a bounded count) and a zone inside the expression
refused (the rest: tests/integration/services/test_job_edits.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler_app import schedules, services

# --- previews ----------------------------------------------------------------------------


def test_preview_shows_utc_and_local_times_and_flags_dst_anomalies():
    schedule = schedules.Schedule(cron="30 2 * * *", timezone="Europe/Paris")

    fires = services.schedule_preview(schedule, count=3, after=datetime(2024, 3, 29, 12, tzinfo=UTC))

    assert [fire["utc"] for fire in fires] == [
        datetime(2024, 3, 30, 1, 30, tzinfo=UTC),
        datetime(2024, 3, 31, 1, 0, tzinfo=UTC),
        datetime(2024, 4, 1, 0, 30, tzinfo=UTC),
    ]
    assert [f"{fire['local']:%H:%M%z}" for fire in fires] == ["02:30+0100", "03:00+0200", "02:30+0200"]
    assert [fire["anomaly"] and fire["anomaly"].split(":")[0] for fire in fires] == [None, "dst_gap", None]


def test_preview_flags_both_passes_of_a_repeated_hour():
    schedule = schedules.Schedule(cron="15 * * * *", timezone="America/New_York")

    fires = services.schedule_preview(schedule, count=3, after=datetime(2024, 11, 3, 5, tzinfo=UTC))

    assert [fire["anomaly"] and fire["anomaly"].split(":")[0] for fire in fires] == [
        "dst_repeated",
        "dst_repeated",
        None,
    ]


def test_preview_count_is_bounded():
    with pytest.raises(services.InvalidInput) as caught:
        services.schedule_preview(
            schedules.Schedule(every=60, anchor=datetime(2024, 1, 1, tzinfo=UTC)), count=services.MAX_PREVIEW + 1
        )
    assert caught.value.field == "count"


def test_a_zone_inside_the_expression_is_refused_with_a_pointer_to_the_timezone_field():
    with pytest.raises(schedules.InvalidSchedule, match="give the time zone in the timezone field"):
        schedules.normalize_cron("CRON_TZ=Europe/Paris 0 9 * * *")
