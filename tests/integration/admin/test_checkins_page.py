"""The admin's check-ins page (admin/checkins.py), the check-in column of the job list and the
job page's status: each status shown, the last ping's body cut and escaped, one tenant's with
?tenant=, one status with ?status=, the permissions it needs."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from scheduler_app import services
from scheduler_app.ledger import checkstatus
from scheduler_app.models import Tenant
from tests.integration.admin.test_admin_permissions import login
from tests.integration.dispatch.test_checkins import key_of, monitored, ping
from tests.integration.ledger.test_checkstatus import one_of_each
from tests.support.admin import url


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="ops", name="Ops")


def row_of(html: str, job_id: int) -> str:
    found = re.search(rf'<tr id="cf-check-{job_id}">(.*?)</tr>', html, re.S)
    assert found, f"no row for job {job_id}"
    return found.group(1)


def test_the_page_shows_every_check_with_its_status_last_ping_body_grace_and_url(admin_client, tenant):
    jobs = one_of_each(tenant)
    long_body = b"<script>alert(1)</script> " + b"x" * 500
    fired = jobs["late"]
    ping(Client(), key_of(jobs["up"]), body=long_body)  # a run of its own, the newest ping

    html = admin_client.get(reverse("cronfleet:checkins")).content.decode()

    for status, job in jobs.items():
        assert f"cf-check-{status}" in row_of(html, job.pk), status
    up = row_of(html, jobs["up"].pk)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in up and "<script>" not in html
    assert "x" * 200 not in up and "…" in up  # cut
    assert re.search(r"\d+\.\d+ s ago<br><small class=\"cf-time\">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", up)
    assert "disk full" in row_of(html, jobs["down"].pk)
    assert "never" in row_of(html, fired.pk) and "never" in row_of(html, jobs["new"].pk)
    assert "5 min 00 s" in row_of(html, jobs["new"].pk)  # the grace
    assert f"/ping/{key_of(jobs['new'])}" in row_of(html, jobs["new"].pk)
    counts = {status: re.search(rf'id="cf-count-{status}">.*?</span> (\d+)</a>', html).group(1) for status in jobs}
    assert counts == {status: "1" for status in checkstatus.STATUSES}


def test_the_page_filters_by_tenant_and_status(admin_client, tenant):
    jobs = one_of_each(tenant)
    other = services.tenant_create(slug="other", name="Other")
    theirs = monitored(other, "theirs")
    page = reverse("cronfleet:checkins")

    mine = admin_client.get(page, {"tenant": "ops"}).content.decode()
    down = admin_client.get(page, {"status": "down"}).content.decode()
    bad = admin_client.get(page, {"status": "sideways"})
    nobody = admin_client.get(page, {"tenant": "nobody"})

    assert f'id="cf-check-{theirs.pk}"' not in mine and f'id="cf-check-{jobs["up"].pk}"' in mine
    assert re.findall(r'<tr id="cf-check-(\d+)">', down) == [str(jobs["down"].pk)]
    assert bad.status_code == 400 and "status: must be one of new, up, late, down, paused" in bad.content.decode()
    assert nobody.status_code == 404 and "there is no tenant &#x27;nobody&#x27;" in nobody.content.decode()


def test_the_page_needs_view_job_and_view_jobrun_and_says_which_is_missing(client, tenant):
    one_of_each(tenant)
    login(client, "view_job")

    refused = client.get(reverse("cronfleet:checkins"))

    assert refused.status_code == 403
    assert "scheduler_app.view_jobrun" in refused.content.decode() and "check-up" not in refused.content.decode()
    login(client, "view_job", "view_jobrun")
    assert client.get(reverse("cronfleet:checkins")).status_code == 200


def test_the_job_list_has_a_check_in_column_and_the_job_page_a_status(admin_client, tenant):
    jobs = one_of_each(tenant)

    listing = admin_client.get(url("job", "changelist")).content.decode()
    page = admin_client.get(url("job", "change", jobs["down"].pk)).content.decode()
    index = admin_client.get(reverse("admin:index")).content.decode()

    assert "Check-in<" in listing
    for status in checkstatus.STATUSES:
        assert f"cf-check-{status}" in listing
    assert re.search(r'id="cf-checkin-status"><span class="cf-state cf-failed cf-check-down">down</span>', page)
    assert f'href="{reverse("cronfleet:checkins")}"' in index
