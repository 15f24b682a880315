"""The admin's add pages, as a superuser: tenants and jobs (tasks, check-ins, flexible windows)
are made through the services, and bad input is refused on its field with nothing written."""

from __future__ import annotations

from datetime import UTC

import pytest

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, Tenant, db_now
from tests.support.admin import TASK, change_form, job_form, url


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme", timezone="Asia/Tokyo")


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="nightly", task_name=TASK, cron="0 9 * * *"))


def test_add_tenant_goes_through_the_service(admin_client, db):
    response = admin_client.post(url("tenant", "add"), {"slug": "beta", "name": "Beta", "timezone": "Europe/Oslo"})

    assert response.status_code == 302
    assert Tenant.objects.filter(slug="beta", timezone="Europe/Oslo").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"slug": "Beta", "name": "Beta", "timezone": "UTC"}, "Use lowercase letters"),
        ({"slug": "beta", "name": "Beta", "timezone": "Mars/Base"}, "unknown time zone"),
        ({"slug": "beta", "name": "Beta\u2028Corp", "timezone": "UTC"}, "must not contain the character U+2028"),
    ],
)
def test_add_tenant_refuses_bad_input(admin_client, db, data, message):
    response = admin_client.post(url("tenant", "add"), data)

    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Tenant.objects.exists()


def test_add_job_goes_through_the_service(admin_client, admin_user, tenant):
    response = admin_client.post(url("job", "add"), job_form(tenant))

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert (job.cron, job.timezone) == ("30 7 * * *", "Asia/Tokyo")  # blank zone: the tenant's
    assert job.next_run_at is not None and job.next_run_at > db_now()
    assert job.next_run_at.astimezone(UTC).time().isoformat() == "22:30:00"  # 07:30 in Tokyo
    event = AuditEvent.objects.get(action="job.created")
    assert (event.job_id, event.actor) == (job.pk, f"admin:{admin_user.username}")


def test_add_job_sets_priority_overlap_and_jitter(admin_client, tenant):
    form = job_form(tenant, priority="8", overlap_policy="skip", jitter_seconds="120", retry_backoff_max_seconds="600")

    response = admin_client.post(url("job", "add"), form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert (job.priority, job.overlap_policy, job.jitter_seconds, job.retry_backoff_max_seconds) == (
        8,
        "skip",
        120,
        600,
    )


def test_add_check_in_job_makes_its_ping_key_and_runs_no_task(admin_client, tenant):
    response = admin_client.post(url("job", "add"), job_form(tenant, target_kind="monitor", grace_seconds="120"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert (job.target_kind, job.target_config, job.task_name) == ("monitor", {"grace_seconds": 120}, "")
    page = admin_client.get(url("job", "change", job.pk)).content.decode()
    assert services.ping_url(job.monitor) in page


def test_add_check_in_job_without_grace_takes_the_default(admin_client, tenant):
    response = admin_client.post(url("job", "add"), job_form(tenant, target_kind="monitor"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get(name="from-admin").target_config == {"grace_seconds": 300}


def test_add_job_with_a_window_places_it_and_its_page_says_where_and_why(admin_client, tenant):
    for minute in range(10):  # 01:00-01:09 but 01:06 each hold a fixed-time job
        if minute != 6:
            services.job_create(
                tenant, services.JobSpec(name=f"fixed-{minute}", cron=f"{minute} 1 * * *", task_name=TASK)
            )

    response = admin_client.post(url("job", "add"), job_form(tenant, cron="", flex_window="daily 01:00-01:10"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="from-admin")
    assert (job.flex_window, job.flex_scope, job.cron, job.timezone) == (
        "daily 01:00-01:10",
        "tenant",
        "6 1 * * *",
        "Asia/Tokyo",
    )
    page = admin_client.get(url("job", "change", job.pk)).content.decode()
    assert "window daily 01:00-01:10, placed at cron 6 1 * * * (Asia/Tokyo)" in page
    assert "01:06 Asia/Tokyo, chosen in daily 01:00-01:10" in page  # the placement's why
    listing = admin_client.get(url("job", "changelist")).content.decode()
    assert "window daily 01:00-01:10, placed at cron 6 1 * * *" in listing


def test_the_change_page_places_an_edited_window_again_and_a_cleared_one_keeps_the_placed_minute(admin_client, tenant):
    job = services.job_create(
        tenant, services.JobSpec(name="nightly-flex", task_name=TASK, flex_window="daily 01:00-01:10")
    )
    form = change_form(job, flex_window=job.flex_window, flex_scope=job.flex_scope)

    response = admin_client.post(url("job", "change", job.pk), {**form, "flex_window": "daily 04:00-04:05"})

    assert response.status_code == 302, response.context["adminform"].form.errors
    job.refresh_from_db()
    assert job.flex_window == "daily 04:00-04:05" and job.cron.split()[1] == "4" and int(job.cron.split()[0]) < 5
    placed = job.cron

    response = admin_client.post(
        url("job", "change", job.pk),
        {
            **change_form(job, flex_window=job.flex_window, flex_scope=job.flex_scope),
            "flex_window": "",
            "flex_scope": "",
        },
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    job.refresh_from_db()
    assert (job.flex_window, job.flex_scope, job.flex_note, job.cron) == ("", "", "", placed)


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"cron": "", "flex_window": "nightly"}, "flex_window", "'nightly' is not a window"),
    ],
)
def test_add_job_refuses_a_bad_window_on_its_field_and_writes_nothing(admin_client, tenant, overrides, field, message):
    response = admin_client.post(url("job", "add"), job_form(tenant, **overrides))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(message in error for error in errors.get(field, [])), errors
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"priority": "10"}, "priority", "must be between 0 and 9"),
        ({"cron": "*/5 * * * *", "jitter_seconds": "600"}, "jitter_seconds", "shortest gap"),
        ({"cron": "0 0 31 2 *"}, "cron", "Bad day-of-month in '0 0 31 2 *'"),
        ({"cron": "", "every_seconds": ""}, "__all__", "give exactly one of cron, every or at"),
        ({"timezone": "Nowhere/Land"}, "timezone", "unknown time zone 'Nowhere/Land'"),
        ({"args": '{"a": 1}'}, "args", "must be a JSON array"),
        ({"kwargs": "[NaN]"}, "kwargs", "NaN and Infinity are not allowed"),
        ({"task_name": "os.system"}, "task_name", "Select a valid choice"),
        ({"task_name": ""}, "task_name", "Choose a task"),
        ({"target_kind": "monitor", "overlap_policy": "skip"}, "overlap_policy", "must be allow for a monitored job"),
        ({"target_kind": "monitor", "grace_seconds": "0"}, "grace_seconds", "greater than or equal to 1"),
        ({"tags": '["one", 2]'}, "tags", "Give tags separated by commas"),
        ({"tags": "ok, " + "x" * 65}, "tags", "tags.1: "),
        ({"cron": "", "run_at_0": "2020-01-01", "run_at_1": "00:00:00"}, "run_at", "is in the past"),
        ({"end_at_0": "2020-01-01", "end_at_1": "00:00:00"}, "end_at", "is in the past"),
        (
            {"cron": "", "run_at_0": "\uff12\uff10\uff13\uff10-01-01", "run_at_1": "00:00:00"},
            "run_at",
            "U+FF12 FULLWIDTH DIGIT TWO is not one",
        ),
        ({"start_at_0": "2030-01-01", "start_at_1": "0\uff10:00:00"}, "start_at", "digits 0-9"),
        ({"end_at_0": "\u0662\u0660\u0663\u0660-01-01", "end_at_1": "00:00:00"}, "end_at", "digits 0-9"),
        ({"name": "nightly"}, "__all__", "already exists"),
        ({"name": "a\u2028b"}, "name", "must not contain the character U+2028 LINE SEPARATOR"),
        ({"description": "pays \u202e001$"}, "description", "must not contain the character U+202E"),
        ({"description": "a\u2029b"}, "description", "must not contain the character U+2029"),
        ({"tags": '["ok", "b\\u2066ad"]'}, "tags", "must not contain the character U+2066"),
    ],
)
def test_add_job_refuses_bad_input_and_writes_nothing(admin_client, job, overrides, field, message):
    jobs, events = Job.objects.count(), AuditEvent.objects.count()

    response = admin_client.post(url("job", "add"), job_form(job.tenant, **overrides))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(message in error for error in errors.get(field, [])), errors
    assert (Job.objects.count(), AuditEvent.objects.count()) == (jobs, events)
