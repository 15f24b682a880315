"""`manage.py demo`'s run lines: times with seconds and the zone, in the settings' zone. The
demo itself, end to end, is tested in tests/system/deploy/test_demo.py."""

from __future__ import annotations

import pytest
from django.test import override_settings

from scheduler_app.management.commands.demo import Command as DemoCommand
from scheduler_app.management.commands.demo import ping_base_for
from scheduler_app.models import Job, JobRun, RunState
from tests.conftest import utc


@pytest.mark.parametrize(
    ("zone", "finished", "scheduled"),
    [
        ("UTC", "12:00:03 UTC", "12:00:00 UTC"),
        ("Europe/Berlin", "13:00:03 CET", "13:00:00 CET"),
    ],
)
def test_a_run_line_gives_times_with_seconds_and_the_zone(zone, finished, scheduled):
    run = JobRun(
        job=Job(name="heartbeat"),
        scheduled_at=utc(2024, 1, 1, 12, 0, 0),
        state=RunState.RETRYING,
        attempt=1,
        finished_at=utc(2024, 1, 1, 12, 0, 3),
        next_attempt_at=utc(2024, 1, 1, 12, 0, 5),
        error="RuntimeError: boom",
    )

    with override_settings(TIME_ZONE=zone):
        line = DemoCommand().run_line(run)

    next_try = scheduled.replace(":00 ", ":05 ")
    assert line == f"{finished}  heartbeat  {scheduled}  retrying    1  RuntimeError: boom (next try {next_try})"


@pytest.mark.parametrize(
    ("port", "no_web", "environ", "base"),
    [
        (8001, False, {}, "http://127.0.0.1:8001"),
        (8001, False, {"CRONFLEET_PING_BASE_URL": ""}, "http://127.0.0.1:8001"),
        (8001, False, {"CRONFLEET_PING_BASE_URL": "https://cron.example.com"}, None),
        (8001, True, {}, None),
    ],
    ids=["the demo's port", "set empty", "set by the user", "no web"],
)
def test_check_in_urls_name_the_demos_own_address_unless_the_user_set_one(port, no_web, environ, base):
    assert ping_base_for(port, no_web, environ) == base
