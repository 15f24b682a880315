"""The admin's job form by kind: every target kind the services take (task, HTTP, command, SQL,
check-in) and every schedule kind, only the chosen kind's fields counting, every refusal of a
form reported at once, through the services' own validation."""

from __future__ import annotations

import sys

import pytest

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job
from tests.support.admin import TASK, job_form, url


@pytest.fixture
def tenant(db):
    return services.tenant_create(slug="acme", name="Acme", timezone="Asia/Tokyo")


@pytest.fixture
def allow_lists(settings, tmp_path):
    settings.CRONFLEET_COMMANDS = {
        "report": {
            "executable": sys.executable,
            "argv": ["-c", "print()", "{day}"],
            "params": {"day": {"type": "date"}},
        }
    }
    settings.CRONFLEET_COMMAND_CWD = str(tmp_path)
    settings.CRONFLEET_SQL = {
        "count_runs": {
            "database": "default",
            "sql": "SELECT count(*) FROM scheduler_app_jobrun WHERE state = %(state)s",
            "params": {"state": {"type": "str", "max_length": 20}},
        }
    }


def kind_form(tenant, target_kind: str, **fields) -> dict:
    """The add form as a browser sends it: both selectors, every kind's fields (blank but
    the ones given)."""
    blank = {
        "schedule_kind": "cron",
        "target_kind": target_kind,
        "http_method": "POST",
        "http_url": "",
        "http_headers": "",
        "http_body": "",
        "command_name": "",
        "command_params": "",
        "sql_name": "",
        "sql_params": "",
        "grace_seconds": "",
        "flex_window": "",
        "flex_scope": "",
        "task_name": "",
    }
    return job_form(tenant, **{**blank, **fields})


def errors_of(response) -> dict:
    assert response.status_code == 200, "the form was accepted"
    return response.context["adminform"].form.errors


@pytest.mark.parametrize(
    ("kind", "fields", "stored"),
    [
        ("task", {"task_name": TASK, "args": "[1]"}, {}),
        (
            "http",
            {"http_url": "https://hooks.example.com/nightly", "http_headers": '{"X-Env": "prod"}', "http_body": "{}"},
            {
                "method": "POST",
                "url": "https://hooks.example.com/nightly",
                "headers": {"X-Env": "prod"},
                "body": "{}",
            },
        ),
        (
            "command",
            {"command_name": "report", "command_params": '{"day": "2024-01-01"}'},
            {"name": "report", "params": {"day": "2024-01-01"}},
        ),
        (
            "sql",
            {"sql_name": "count_runs", "sql_params": '{"state": "dead"}'},
            {"name": "count_runs", "params": {"state": "dead"}},
        ),
        ("monitor", {"grace_seconds": "90"}, {"grace_seconds": 90}),
    ],
)
def test_add_job_of_each_target_kind(admin_client, tenant, allow_lists, kind, fields, stored):
    response = admin_client.post(url("job", "add"), kind_form(tenant, kind, **fields))

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert (job.target_kind, job.target_config) == (kind, stored)
    assert job.task_name == (TASK if kind == "task" else "")
    assert AuditEvent.objects.filter(job=job, action="job.created").exists()


@pytest.mark.parametrize(
    ("kind", "fields", "field", "message"),
    [
        ("task", {"task_name": ""}, "task_name", "Choose a task"),
        ("http", {"http_url": ""}, "http_url", "is required"),
        ("http", {"http_url": "ftp://files.example.com/x"}, "http_url", "scheme 'ftp' is not allowed"),
        ("http", {"http_url": "https://hooks.example.com/", "http_headers": "[1]"}, "http_headers", ""),
        ("command", {"command_name": ""}, "command_name", ""),
        ("command", {"command_name": "report", "command_params": '{"day": "soon"}'}, "command_params", "day"),
        ("sql", {"sql_name": "count_runs", "sql_params": '{"nope": 1}'}, "sql_params", "nope"),
        ("monitor", {"grace_seconds": "0"}, "grace_seconds", "greater than or equal to 1"),
    ],
)
def test_add_job_refuses_a_bad_target_on_its_field_and_writes_nothing(
    admin_client, tenant, allow_lists, kind, fields, field, message
):
    events = AuditEvent.objects.count()

    response = admin_client.post(url("job", "add"), kind_form(tenant, kind, **fields))

    errors = errors_of(response)
    assert any(message in error for error in errors.get(field, [])), errors
    assert (Job.objects.count(), AuditEvent.objects.count()) == (0, events)


def test_the_fields_of_kinds_not_chosen_are_ignored(admin_client, tenant):
    form = kind_form(
        tenant,
        "http",
        http_url="https://hooks.example.com/",
        task_name="os.system",  # not a choice: ignored, the job is an HTTP one
        args="{not json",
        grace_seconds="-5",
        schedule_kind="every",
        every_seconds="600",
        cron="not a cron",
        flex_window="nightly",
    )

    response = admin_client.post(url("job", "add"), form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert (job.target_kind, job.task_name, job.args) == ("http", "", [])
    assert (job.every_seconds, job.cron, job.flex_window) == (600, "", "")


@pytest.mark.parametrize(
    ("schedule_kind", "fields", "expected"),
    [
        ("cron", {"cron": "15 3 * * *"}, {"cron": "15 3 * * *", "every_seconds": None, "after_job": None}),
        ("every", {"every_seconds": "120"}, {"cron": "", "every_seconds": 120}),
        ("at", {"run_at_0": "2099-01-01", "run_at_1": "08:00:00"}, {"cron": "", "every_seconds": None}),
        ("window", {"flex_window": "daily 01:00-01:10"}, {"flex_window": "daily 01:00-01:10"}),
    ],
)
def test_add_job_of_each_schedule_kind(admin_client, tenant, schedule_kind, fields, expected):
    form = kind_form(tenant, "task", task_name=TASK, schedule_kind=schedule_kind, **{"cron": "", **fields})

    response = admin_client.post(url("job", "add"), form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert {name: getattr(job, name) for name in expected} == expected


def test_add_chained_job(admin_client, tenant):
    parent = services.job_create(tenant, services.JobSpec(name="extract", task_name=TASK, cron="0 1 * * *"))
    form = kind_form(tenant, "task", task_name=TASK, schedule_kind="after", cron="0 2 * * *", after_job=parent.pk)

    response = admin_client.post(url("job", "add"), form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert (job.after_job_id, job.cron, job.after_states) == (parent.pk, "", ["succeeded"])


def test_every_refusal_of_the_form_is_reported_at_once(admin_client, tenant):
    form = kind_form(
        tenant,
        "http",
        http_url="ftp://files.example.com/x",
        cron="61 * * * *",
        timezone="Nowhere/Land",
        priority="12",
        name="a\u2028b",
    )

    errors = errors_of(admin_client.post(url("job", "add"), form))

    assert {"cron", "timezone", "http_url", "priority", "name"} <= set(errors), errors
    assert "Nowhere/Land" in errors["timezone"][0] and "61" in errors["cron"][0]
    assert not Job.objects.exists()


def test_a_form_field_error_and_the_services_refusals_are_reported_together(admin_client, tenant):
    form = kind_form(tenant, "task", task_name=TASK, timeout_seconds="soon", timezone="Nowhere/Land", cron="bad")

    errors = errors_of(admin_client.post(url("job", "add"), form))

    assert {"timeout_seconds", "timezone", "cron"} <= set(errors), errors


# --- the change page -------------------------------------------------------------------


@pytest.fixture
def job(tenant):
    return services.job_create(tenant, services.JobSpec(name="nightly", task_name=TASK, cron="0 9 * * *"))


def change_data(admin_client, job, **overrides) -> dict:
    """The change form as the page fills it, with `overrides`."""
    form = admin_client.get(url("job", "change", job.pk)).context["adminform"].form
    data = {}
    for name in form.fields:
        value = form[name].value()
        if isinstance(value, list | tuple) and name in ("start_at", "end_at", "run_at"):
            data.update({f"{name}_0": "", f"{name}_1": ""})
        elif value is not None:
            data[name] = value
    data.update(overrides)
    return data


def test_the_change_page_turns_a_task_job_into_a_webhook_on_an_interval(admin_client, job):
    data = change_data(
        admin_client, job, target_kind="http", http_url="https://hooks.example.com/n", schedule_kind="every"
    )
    data["every_seconds"] = "300"

    response = admin_client.post(url("job", "change", job.pk), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    job.refresh_from_db()
    assert (job.target_kind, job.task_name, job.target_config["url"]) == ("http", "", "https://hooks.example.com/n")
    assert (job.cron, job.every_seconds, job.version) == ("", 300, 2)
    page = admin_client.get(url("job", "change", job.pk)).content.decode()
    assert 'value="https://hooks.example.com/n"' in page  # the saved target shows in its kind's fields


def test_the_change_page_reports_every_refusal_at_once_and_saves_nothing(admin_client, job):
    data = change_data(admin_client, job, target_kind="http", http_url="", cron="61 * * * *", timezone="Nowhere/Land")

    errors = errors_of(admin_client.post(url("job", "change", job.pk), data))

    assert {"http_url", "cron", "timezone"} <= set(errors), errors
    job.refresh_from_db()
    assert (job.target_kind, job.cron, job.version) == ("task", "0 9 * * *", 1)


def test_the_add_page_offers_both_selectors_with_their_kinds(admin_client, tenant):
    page = admin_client.get(url("job", "add")).content.decode()

    for value in ("task", "http", "command", "sql", "monitor", "cron", "every", "at", "window", "after"):
        assert f'<option value="{value}"' in page, value
    assert page.count('class="cf-kind"') == 2 and "scheduler_app/jobform.js" in page
