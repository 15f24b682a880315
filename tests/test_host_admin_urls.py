"""Cronfleet installed in a host project (tests/support/host_urls.py: the host's admin at /admin/,
Cronfleet's URLs under /cron/): the app registers its models and leaves the host's admin site
as Django made it; its routes, their names and its links carry the prefix; nothing of it is
served outside the prefix.

Cronfleet's own deployment names the admin after itself (project/admin.py, imported by
project/urls.py), and this test process may have loaded it already: what the app alone does to
the site is checked in a fresh process whose URLconf is the host's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from django.test import Client
from django.urls import Resolver404, resolve, reverse

from scheduler_app import services
from scheduler_app.api.handler import no_route
from scheduler_app.api.pings import ping
from scheduler_app.models import Job
from tests.conftest import ROOT, environment_with

KEY = str(uuid.uuid4())

# Run in a fresh process on the test settings with the host's URLconf: project/urls.py (and so
# project/admin.py) is never imported there. Prints what the site looks like as JSON.
APP_ALONE = """
import json, sys
import django
from django.conf import settings

settings.ROOT_URLCONF = "tests.support.host_urls"
django.setup()

from django.contrib import admin
from django.contrib.admin import AdminSite
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()  # the test client's host is allowed, as under pytest
login = Client().get("/admin/login/")
names = ("site_header", "site_title", "index_title", "site_url", "index_template", "enable_nav_sidebar")
print(json.dumps({
    "changed": [name for name in names if getattr(admin.site, name) != getattr(AdminSite, name)],
    "registered": sorted(model._meta.label for model in admin.site._registry),
    "branding_loaded": "project.admin" in sys.modules,
    "login": login.status_code,
    "title": login.content.decode().split("<title>")[1].split("</title>")[0],
    "header": login.content.decode().split('id="site-name">')[1].split("</")[0],
}))
"""


@pytest.fixture(autouse=True)
def host(settings):
    settings.ROOT_URLCONF = "tests.support.host_urls"  # pytest-django's settings fixture clears the URL caches


@pytest.fixture(scope="module")
def app_alone() -> dict:
    done = subprocess.run([sys.executable, "-c", APP_ALONE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=environment_with(DJANGO_SETTINGS_MODULE="tests.settings"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_app_leaves_the_host_s_admin_site_as_django_made_it(app_alone):
    assert app_alone["branding_loaded"] is False
    assert app_alone["changed"] == []
    assert (app_alone["login"], app_alone["title"]) == (200, "Log in | Django site admin")
    assert "Django administration" in app_alone["header"]


def test_the_app_registers_its_models_and_leaves_other_apps_registrations(app_alone):
    registered = set(app_alone["registered"])

    assert {"scheduler_app.Job", "scheduler_app.JobRun", "scheduler_app.Tenant"} <= registered
    assert {"django_celery_beat.PeriodicTask", "django_celery_results.TaskResult", "auth.User"} <= registered


def test_the_host_s_admin_login_page_answers(db):
    assert Client().get("/admin/login/").status_code == 200


@pytest.mark.parametrize(("name", "kwargs", "path", "view"), [
    ("cronfleet:api:job-list", {}, "/cron/api/v1/jobs/", None),
    ("cronfleet:api:me", {}, "/cron/api/v1/me", None),
    ("cronfleet:schema", {}, "/cron/api/schema/", None),
    ("cronfleet:docs", {}, "/cron/api/docs/", None),
    ("cronfleet:ping", {"key": KEY}, f"/cron/ping/{KEY}", ping),
    ("cronfleet:ping-signal", {"key": KEY, "action": "start"}, f"/cron/ping/{KEY}/start", ping),
    ("cronfleet:ping-cell", {"cell": "eu1", "key": KEY}, f"/cron/ping/eu1/{KEY}", ping),
    ("cronfleet:ping-cell-signal", {"cell": "eu1", "key": KEY, "action": "fail"}, f"/cron/ping/eu1/{KEY}/fail", ping),
    ("cronfleet:healthz", {}, "/cron/healthz", None),
    ("cronfleet:readyz", {}, "/cron/readyz", None),
    ("cronfleet:metrics", {}, "/cron/metrics", None),
    ("cronfleet:dashboard", {}, "/cron/dashboard/", None),
])
def test_every_route_resolves_and_reverses_under_the_prefix(name, kwargs, path, view):
    assert reverse(name, kwargs=kwargs) == path
    found = resolve(path)
    assert found.view_name == name
    assert view is None or found.func is view


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/nope", "/healthz", "/metrics", f"/ping/{KEY}", "/dashboard/"])
def test_nothing_is_served_outside_the_prefix(path):
    with pytest.raises(Resolver404):
        resolve(path)


def test_an_unknown_path_under_the_prefix_s_api_answers_the_api_s_json_404(db):
    assert resolve("/cron/api/nope").func is no_route

    for response in (Client().get("/cron/api/nope"), Client().post("/cron/api/nope", data=b"{}",
                                                                     content_type="application/json")):
        assert response.status_code == 404
        assert response.json() == {"errors": [{"field": "path", "message": "no route '/cron/api/nope'"}]}
    assert Client().get("/cron/api/v1/jobs").json() == {"errors": [{
        "field": "path", "message": "no route '/cron/api/v1/jobs'; the route is '/cron/api/v1/jobs/'"}]}


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
    job = services.job_create(tenant, services.JobSpec(name="backup", target_kind="monitor", cron="* * * * *",
                                                       monitor={"grace_seconds": 300}))
    monitor = Job.objects.get(pk=job.pk).monitor

    assert services.ping_url(monitor, "https://example.com/") == f"https://example.com/cron/ping/{monitor.ping_key}"
    assert Client().get(f"/cron/ping/{monitor.ping_key}").status_code == 200
    assert Client().get(f"/ping/{monitor.ping_key}").status_code == 404


def test_the_api_docs_page_reads_the_schema_under_the_prefix(db):
    page = Client().get("/cron/api/docs/")
    schema = Client().get("/cron/api/schema/", {"format": "json"})

    assert page.status_code == 200 and "/cron/api/schema/" in page.content.decode()
    assert schema.status_code == 200 and "/cron/api/v1/jobs/" in schema.json()["paths"]
