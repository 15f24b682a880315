"""Cronfleet installed in a host project (tests/support/host_urls.py: the host's admin at /admin/,
Cronfleet's URLs under /cron/), the part that needs no database: its routes and their names carry
the prefix; nothing of it is resolved outside the prefix. The pages served there are
tests/integration/admin/test_host_admin_urls.py; the host's admin site, in a fresh process,
tests/system/admin/test_host_admin_urls.py.
"""

from __future__ import annotations

import uuid

import pytest
from django.urls import Resolver404, resolve, reverse

from scheduler_app.api.pings import ping

KEY = str(uuid.UUID(int=0x5EED))  # fixed: a parameter id, alike in every xdist worker


@pytest.fixture(autouse=True)
def host(settings):
    settings.ROOT_URLCONF = "tests.support.host_urls"  # pytest-django's settings fixture clears the URL caches


@pytest.mark.parametrize(
    ("name", "kwargs", "path", "view"),
    [
        ("cronfleet:api:job-list", {}, "/cron/api/v1/jobs/", None),
        ("cronfleet:api:me", {}, "/cron/api/v1/me", None),
        ("cronfleet:schema", {}, "/cron/api/schema/", None),
        ("cronfleet:docs", {}, "/cron/api/docs/", None),
        ("cronfleet:ping", {"key": KEY}, f"/cron/ping/{KEY}", ping),
        ("cronfleet:ping-signal", {"key": KEY, "action": "start"}, f"/cron/ping/{KEY}/start", ping),
        ("cronfleet:ping-cell", {"cell": "eu1", "key": KEY}, f"/cron/ping/eu1/{KEY}", ping),
        (
            "cronfleet:ping-cell-signal",
            {"cell": "eu1", "key": KEY, "action": "fail"},
            f"/cron/ping/eu1/{KEY}/fail",
            ping,
        ),
        ("cronfleet:healthz", {}, "/cron/healthz", None),
        ("cronfleet:readyz", {}, "/cron/readyz", None),
        ("cronfleet:metrics", {}, "/cron/metrics", None),
        ("cronfleet:dashboard", {}, "/cron/dashboard/", None),
    ],
)
def test_every_route_resolves_and_reverses_under_the_prefix(name, kwargs, path, view):
    assert reverse(name, kwargs=kwargs) == path
    found = resolve(path)
    assert found.view_name == name
    assert view is None or found.func is view


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/nope", "/healthz", "/metrics", f"/ping/{KEY}", "/dashboard/"])
def test_nothing_is_served_outside_the_prefix(path):
    with pytest.raises(Resolver404):
        resolve(path)
