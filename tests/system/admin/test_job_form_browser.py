"""The job form in a real headless Chromium: choosing a target kind or a schedule kind shows
that kind's fields only (scheduler_app/static/scheduler_app/jobform.js), and a job made that
way is saved. Screenshots go to var/test-artifacts/console/."""

from __future__ import annotations

import time

import pytest

from scheduler_app import services
from scheduler_app.models import Job
from tests.conftest import ROOT
from tests.support import browser

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not browser.available(), reason="chromium and chromedriver are not installed"),
]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "console"
SHOWN = """
    const shown = (name) => {
        const row = document.querySelector('.form-row.field-' + name);
        return !!row && row.getBoundingClientRect().height > 0;
    };
    return Object.fromEntries(arguments[0].map((name) => [name, shown(name)]));
"""
CHOOSE = """
    const select = document.querySelector('#id_' + arguments[0]);
    select.value = arguments[1];
    select.dispatchEvent(new Event('change'));
"""
FIELDS = ["task_name", "args", "http_url", "http_headers", "command_name", "sql_name", "grace_seconds"]
SCHEDULE_FIELDS = ["cron", "every_seconds", "run_at", "flex_window", "after_job", "jitter_seconds"]


@pytest.fixture
def chromium():
    found = browser.Browser(width=1280, height=1000)
    yield found
    found.close()


@pytest.fixture
def staff(django_user_model):
    django_user_model.objects.create_superuser("ops", "ops@example.com", "a long passphrase 7")
    return services.tenant_create(slug="demo", name="Demo", timezone="Europe/Berlin")


def wait_for(chromium, script: str, *args, timeout: float = 10):
    """The script's answer once truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while not (answer := chromium.js(script, *args)):
        assert time.monotonic() < deadline, f"not within {timeout} s: {script}"
        time.sleep(0.05)
    return answer


def test_choosing_a_kind_shows_only_its_fields_and_the_job_is_saved(chromium, live_server, staff):
    chromium.log_in(
        f"{live_server.url}/admin/login/",
        "ops",
        "a long passphrase 7",
        until="document.body && document.body.innerText.includes('Cronfleet administration')",
    )
    chromium.get(f"{live_server.url}/admin/scheduler_app/job/add/")
    wait_for(chromium, "return !!document.querySelector('#id_target_kind')")

    shown = chromium.js(SHOWN, FIELDS + SCHEDULE_FIELDS)
    assert {name for name, visible in shown.items() if visible} == {"task_name", "args", "cron", "jitter_seconds"}

    chromium.js(CHOOSE, "target_kind", "http")
    chromium.js(CHOOSE, "schedule_kind", "every")
    shown = chromium.js(SHOWN, FIELDS + SCHEDULE_FIELDS)
    chromium.screenshot(ARTIFACTS / "job-form-http.png")
    assert {name for name, visible in shown.items() if visible} == {
        "http_url",
        "http_headers",
        "every_seconds",
        "jitter_seconds",
    }

    chromium.js(CHOOSE, "target_kind", "monitor")
    chromium.js(CHOOSE, "schedule_kind", "after")
    shown = chromium.js(SHOWN, FIELDS + SCHEDULE_FIELDS)
    assert {name for name, visible in shown.items() if visible} == {"grace_seconds", "after_job"}

    chromium.js(CHOOSE, "schedule_kind", "every")
    chromium.js(
        """
        document.querySelector('#id_tenant').append(new Option('demo', arguments[0], true, true));
        document.querySelector('#id_name').value = 'pinged';
        document.querySelector('#id_every_seconds').value = '600';
        document.querySelector('#job_form').submit();""",
        str(staff.pk),
    )
    wait_for(chromium, "return location.pathname.endsWith('/admin/scheduler_app/job/')")
    job = Job.objects.get(name="pinged")
    assert (job.target_kind, job.every_seconds, job.cron) == ("monitor", 600, "")


def test_a_saved_job_s_page_shows_its_own_kinds_fields(chromium, live_server, staff):
    job = services.job_create(
        staff,
        services.JobSpec(name="hook", target_kind="http", http={"url": "https://hooks.example.com/x"}, every=300),
    )
    chromium.log_in(
        f"{live_server.url}/admin/login/",
        "ops",
        "a long passphrase 7",
        until="document.body && document.body.innerText.includes('Cronfleet administration')",
    )

    chromium.get(f"{live_server.url}/admin/scheduler_app/job/{job.pk}/change/")
    wait_for(chromium, "return !!document.querySelector('#id_target_kind')")

    shown = chromium.js(SHOWN, FIELDS + SCHEDULE_FIELDS)
    assert {name for name, visible in shown.items() if visible} == {
        "http_url",
        "http_headers",
        "every_seconds",
        "jitter_seconds",
    }
    assert chromium.js("return document.querySelector('#id_http_url').value") == "https://hooks.example.com/x"
