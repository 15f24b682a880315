"""Cronfleet installed in a host project (tests/support/host_urls.py: the host's admin at /admin/,
Cronfleet's URLs under /cron/): its pages and its API answer under the prefix, its links carry
the prefix, the host's admin login page answers. The routes alone are
tests/unit/admin/test_host_admin_urls.py; the host's admin site, in a fresh process,
tests/system/admin/test_host_admin_urls.py.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import resolve, reverse

from scheduler_app import services
from scheduler_app.api.handler import no_route
from scheduler_app.models import Job


@pytest.fixture(autouse=True)
def host(settings):
    settings.ROOT_URLCONF = "tests.support.host_urls"  # pytest-django's settings fixture clears the URL caches


def test_the_host_s_admin_login_page_answers(db):
    assert Client().get("/admin/login/").status_code == 200


def test_an_unknown_path_under_the_prefix_s_api_answers_the_api_s_json_404(db):
    assert resolve("/cron/api/nope").func is no_route

    for response in (
        Client().get("/cron/api/nope"),
        Client().post("/cron/api/nope", data=b"{}", content_type="application/json"),
    ):
        assert response.status_code == 404
        assert response.json() == {"errors": [{"field": "path", "message": "no route '/cron/api/nope'"}]}
    assert Client().get("/cron/api/v1/jobs").json() == {
        "errors": [{"field": "path", "message": "no route '/cron/api/v1/jobs'; the route is '/cron/api/v1/jobs/'"}]
    }


def test_the_api_answers_under_the_prefix(db):
    response = Client().get("/cron/api/v1/jobs/")

    assert response.status_code == 401
    assert response.json()["errors"][0]["field"] == "Authorization"


def test_the_dashboard_is_a_staff_page_in_the_admin_s_chrome_under_the_prefix(admin_client, tenant):
    page = admin_client.get("/cron/dashboard/")
    mine = admin_client.get("/cron/dashboard/", {"tenant": tenant.slug}).content.decode()

    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="cf-dashboard"' in html and 'id="header"' in html  # the admin's base template
    assert '<a href="/admin/">Home</a>' in html
    assert 'href="/cron/dashboard/">all tenants</a>' in mine
    assert Client().get("/cron/dashboard/").url == "/admin/login/?next=/cron/dashboard/"


def test_the_app_s_section_and_a_tenant_s_page_link_the_dashboard_under_the_prefix(admin_client, tenant):
    section = admin_client.get("/admin/scheduler_app/").content.decode()
    change = admin_client.get(reverse("admin:scheduler_app_tenant_change", args=[tenant.pk])).content.decode()

    assert '<a href="/cron/dashboard/" id="cf-dashboard-link">' in section
    assert f'<a href="/cron/dashboard/?tenant={tenant.slug}">dashboard</a>' in change


def test_a_check_in_url_carries_the_prefix_and_answers_there(tenant):
    job = services.job_create(
        tenant, services.JobSpec(name="backup", target_kind="monitor", cron="* * * * *", monitor={"grace_seconds": 300})
    )
    monitor = Job.objects.get(pk=job.pk).monitor

    assert services.ping_url(monitor, "https://example.com/") == f"https://example.com/cron/ping/{monitor.ping_key}"
    assert Client().get(f"/cron/ping/{monitor.ping_key}").status_code == 200
    assert Client().get(f"/ping/{monitor.ping_key}").status_code == 404


def test_the_api_docs_page_reads_the_schema_under_the_prefix(db):
    page = Client().get("/cron/api/docs/")
    schema = Client().get("/cron/api/schema/", {"format": "json"})

    assert page.status_code == 200 and "/cron/api/schema/" in page.content.decode()
    assert schema.status_code == 200 and "/cron/api/v1/jobs/" in schema.json()["paths"]
