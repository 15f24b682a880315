"""Cronfleet installed in a host project (tests/support/host_urls.py: the host's admin at /admin/,
Cronfleet's URLs under /cron/): the app registers its models and leaves the host's admin site
as Django made it.

Cronfleet's own deployment names the admin after itself (project/admin.py, imported by
project/urls.py), and this test process may have loaded it already: what the app alone does to
the site is checked in a fresh process whose URLconf is the host's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, environment_with

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
    done = subprocess.run(
        [sys.executable, "-c", APP_ALONE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment_with(DJANGO_SETTINGS_MODULE="tests.settings"),
    )
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
