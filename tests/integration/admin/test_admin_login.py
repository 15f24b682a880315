"""The admin's login throttle (scheduler_app/admin/login.py): failed logins per username and
address, counted in Redis (or in the process without it), refuse even the right password
until the window has passed. The window is driven by the clock (time_machine), not by sleeping."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import Client

_names = itertools.count()
START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
THROTTLED = "Too many failed logins for this username from your address"


@pytest.fixture(params=["redis", "memory"])
def counting(request, settings):
    """Where failures are counted: the suite's Redis, or this process (no Redis URL)."""
    if request.param == "memory":
        settings.CRONFLEET_RATE_LIMIT_REDIS_URL = ""
    else:
        assert settings.CRONFLEET_RATE_LIMIT_REDIS_URL.startswith("redis://")
    return request.param


@pytest.fixture
def staff(db, settings):
    name = f"ops-{next(_names)}-{datetime.now().timestamp():.0f}"  # fresh counters in a shared Redis
    return get_user_model().objects.create_user(name, password="the-right-password-1", is_staff=True)


def log_in(client: Client, username: str, password: str, address: str = "198.51.100.7"):
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def test_twenty_wrong_passwords_lock_the_right_one_out_until_the_window_passes(counting, staff, settings):
    settings.CRONFLEET_ADMIN_LOGIN_FAILURES, settings.CRONFLEET_ADMIN_LOGIN_WINDOW_SECONDS = 10, 900
    client = Client()

    with time_machine.travel(START, tick=False):
        wrong = [log_in(client, staff.username, f"guess-{n}") for n in range(20)]
        refused = log_in(client, staff.username, "the-right-password-1")
    with time_machine.travel(START + timedelta(seconds=899), tick=False):
        still_refused = log_in(client, staff.username, "the-right-password-1")
    with time_machine.travel(START + timedelta(seconds=901), tick=False):
        allowed = log_in(client, staff.username, "the-right-password-1")

    assert all(response.status_code == 200 for response in wrong)  # the form again, with its error
    assert [THROTTLED in response.content.decode() for response in wrong] == [False] * 10 + [True] * 10
    assert refused.status_code == 200 and THROTTLED in refused.content.decode()
    assert "try again in 15 minute(s)" in refused.content.decode()
    assert still_refused.status_code == 200 and THROTTLED in still_refused.content.decode()
    assert (allowed.status_code, allowed["Location"]) == (302, "/admin/")
    assert client.get("/admin/").status_code == 200


def test_the_throttle_is_per_username_and_address(counting, staff, settings):
    settings.CRONFLEET_ADMIN_LOGIN_FAILURES = 3
    other = get_user_model().objects.create_user(f"{staff.username}-b", password="other-password-2", is_staff=True)

    with time_machine.travel(START, tick=False):
        for n in range(3):
            log_in(Client(), staff.username, f"guess-{n}", address="203.0.113.9")
        same = log_in(Client(), staff.username, "the-right-password-1", address="203.0.113.9")
        upper = log_in(Client(), staff.username.upper(), "the-right-password-1", address="203.0.113.9")
        elsewhere = log_in(Client(), staff.username, "the-right-password-1", address="192.0.2.44")
        other_user = log_in(Client(), other.username, "other-password-2", address="203.0.113.9")

    assert THROTTLED in same.content.decode() and THROTTLED in upper.content.decode()
    assert (elsewhere.status_code, other_user.status_code) == (302, 302)


def test_failures_older_than_the_window_are_forgotten(counting, staff, settings):
    settings.CRONFLEET_ADMIN_LOGIN_FAILURES, settings.CRONFLEET_ADMIN_LOGIN_WINDOW_SECONDS = 3, 60

    for seconds in (0, 30, 61):  # the first has aged out when the third is made
        with time_machine.travel(START + timedelta(seconds=seconds), tick=False):
            log_in(Client(), staff.username, "wrong")
    with time_machine.travel(START + timedelta(seconds=62), tick=False):
        allowed = log_in(Client(), staff.username, "the-right-password-1")

    assert allowed.status_code == 302


def test_an_unanswering_redis_lets_logins_through(staff, settings):
    settings.CRONFLEET_RATE_LIMIT_REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens on port 9
    settings.CRONFLEET_ADMIN_LOGIN_FAILURES = 1

    wrong = log_in(Client(), staff.username, "wrong")
    right = log_in(Client(), staff.username, "the-right-password-1")

    assert (wrong.status_code, right.status_code) == (200, 302)
