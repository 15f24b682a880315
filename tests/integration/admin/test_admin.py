"""The admin, as a superuser: pages load, writes go through the services, the ledger is read-only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app import services
from scheduler_app.models import ApiKey, AuditEvent, Job, JobRun, RunState, Tenant, Trigger
from tests.support.admin import TASK, change_form, post_action, url

BASE = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme", timezone="Asia/Tokyo")


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="nightly", task_name=TASK, cron="0 9 * * *"))


@pytest.fixture
def runs(job) -> list[JobRun]:
    made = []
    for n, state in enumerate([RunState.SUCCEEDED, RunState.DEAD, RunState.SKIPPED]):
        made.append(
            JobRun.objects.create(
                job=job,
                tenant=job.tenant,
                scheduled_at=BASE + timedelta(hours=n),
                state=state,
                created_at=BASE,
                reason="coalesced" if n == 2 else "",
                error="boom" if n == 1 else "",
            )
        )
    AuditEvent.objects.create(
        tenant=job.tenant,
        job=job,
        job_name=job.name,
        run_id=made[1].id,
        action="run.dead",
        actor="worker:w1",
        detail={"error": "boom"},
    )
    return made


def test_admin_configuration_passes_system_checks(db):
    call_command("check", "scheduler_app", fail_level="WARNING")


# --- pages load -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/admin/",
        "/admin/scheduler_app/tenant/",
        "/admin/scheduler_app/tenant/?q=acm",
        "/admin/scheduler_app/job/",
        "/admin/scheduler_app/job/?q=night&enabled__exact=1&misfire_policy__exact=run_once",
        "/admin/scheduler_app/jobrun/",
        "/admin/scheduler_app/jobrun/?state__exact=dead&trigger__exact=schedule",
        "/admin/scheduler_app/jobrun/?scheduled_at__year=2024&scheduled_at__month=1",
        "/admin/scheduler_app/auditevent/",
        "/admin/scheduler_app/auditevent/?action=run.*",
        "/admin/scheduler_app/auditevent/?action=job.created",
        "/admin/scheduler_app/tenant/add/",
        "/admin/scheduler_app/job/add/",
    ],
)
def test_pages_load(admin_client, runs, path):
    assert admin_client.get(path).status_code == 200


def test_filtered_by_tenant_and_job_links(admin_client, runs, job):
    tenant_id = job.tenant_id
    for model in ("job", "jobrun", "auditevent"):
        assert admin_client.get(f"{url(model, 'changelist')}?tenant__id__exact={tenant_id}").status_code == 200
    response = admin_client.get(f"{url('jobrun', 'changelist')}?job__id__exact={job.pk}")
    assert response.status_code == 200
    assert response.context["cl"].result_count == 3


def test_change_pages_load_for_each_model(admin_client, runs, job):
    for model, pk in [
        ("tenant", job.tenant_id),
        ("job", job.pk),
        ("jobrun", runs[1].pk),
        ("auditevent", AuditEvent.objects.get(action="run.dead").pk),
    ]:
        response = admin_client.get(url(model, "change", pk))
        assert response.status_code == 200, model


def test_job_changelist_shows_schedule_and_last_run_state(admin_client, runs, job):
    response = admin_client.get(url("job", "changelist"))

    html = response.content.decode()
    assert "cron 0 9 * * * (Asia/Tokyo)" in html
    assert response.context["cl"].result_list[0].last_run_state == "skipped"  # the latest by fire time
    assert '<span class="cf-state cf-skipped">skipped</span>' in html  # coloured as in the ledger


def test_job_changelist_reads_the_job_table_once_for_its_count_and_not_for_priority_choices(admin_client, job):
    from django.db import connection

    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        listing = admin_client.get(url("job", "changelist"))
    by_five = admin_client.get(url("job", "changelist"), {"priority__exact": "5"}).context["cl"].result_list
    by_nine = admin_client.get(url("job", "changelist"), {"priority__exact": "9"}).context["cl"].result_list
    bad = admin_client.get(url("job", "changelist"), {"priority__exact": "high"})

    assert statements and not [sql for sql in statements if "DISTINCT" in sql]
    assert len([sql for sql in statements if "COUNT(" in sql]) == 1, statements
    assert "?priority__exact=0" in listing.content.decode() and "?priority__exact=9" in listing.content.decode()
    assert [found.pk for found in by_five] == [job.pk] and list(by_nine) == []
    assert bad.status_code == 302 and "e=1" in bad.url  # the admin's "invalid filter" page


def test_job_change_page_shows_the_next_fires(admin_client, job):
    html = admin_client.get(url("job", "change", job.pk)).content.decode()

    assert "Next 5 fires" in html
    assert html.count(" 09:00:00 JST (00:00:00Z)") == 5  # one time a fire, in its zone, and UTC
    assert f"?job__id__exact={job.pk}" in html  # links to its runs and audit events


def test_job_change_page_saves_through_the_service(admin_client, job):
    version = job.version

    response = admin_client.post(url("job", "change", job.pk), change_form(job, name="renamed", cron="15 6 * * *"))

    assert response.status_code == 302, response.content.decode()[:2000]
    job.refresh_from_db()
    assert (job.name, job.cron, job.version) == ("renamed", "15 6 * * *", version + 1)
    assert job.next_run_at.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%H:%M") == "06:15"
    event = AuditEvent.objects.get(job_id=job.id, action="job.updated")
    assert event.actor == "admin:admin" and event.detail["changes"]["name"] == ["nightly", "renamed"]


def test_job_change_page_shown_again_with_a_field_error_still_previews_the_saved_schedule(admin_client, job):
    response = admin_client.post(url("job", "change", job.pk), change_form(job, cron="0 0 31 2 *", jitter_seconds=""))

    assert response.status_code == 200
    assert "jitter_seconds" in response.context["adminform"].form.errors
    assert response.content.decode().count(" 09:00:00 JST (00:00:00Z)") == 5


def test_job_change_page_shows_a_bad_edit_on_its_field_and_saves_nothing(admin_client, job):
    response = admin_client.post(url("job", "change", job.pk), change_form(job, cron="0 0 31 2 *"))

    assert response.status_code == 200
    assert "Bad day-of-month" in str(response.context["adminform"].form.errors["cron"])
    job.refresh_from_db()
    assert (job.cron, job.version) == ("0 9 * * *", 1)


def test_job_change_page_refuses_an_end_in_the_past_on_its_field(admin_client, job):
    response = admin_client.post(
        url("job", "change", job.pk), change_form(job, end_at_0="2020-01-01", end_at_1="00:00:00")
    )

    assert response.status_code == 200
    assert "is in the past" in str(response.context["adminform"].form.errors["end_at"])
    job.refresh_from_db()
    assert (job.end_at, job.version) == (None, 1)


def test_job_change_page_refuses_full_width_digits_in_an_instant(admin_client, job):
    form = change_form(job, end_at_0="\uff12\uff10\uff13\uff10-01-01", end_at_1="00:00:00")

    response = admin_client.post(url("job", "change", job.pk), form)

    assert response.status_code == 200
    assert "digits 0-9" in str(response.context["adminform"].form.errors["end_at"])
    job.refresh_from_db()
    assert (job.end_at, job.version) == (None, 1)


def test_tenant_change_page_sets_quotas_through_the_service(admin_client, tenant):
    data = {
        "name": tenant.name,
        "timezone": tenant.timezone,
        "is_active": "on",
        "max_jobs": "10",
        "min_interval_seconds": "60",
        "max_fires_per_minute": "",
        "max_concurrent_runs": "4",
        "weight": "2",
        "api_requests_per_minute": "",
    }

    response = admin_client.post(url("tenant", "change", tenant.pk), data)

    assert response.status_code == 302, response.content.decode()[:2000]
    tenant.refresh_from_db()
    assert (tenant.max_jobs, tenant.min_interval_seconds, tenant.max_concurrent_runs, tenant.weight) == (10, 60, 4, 2)
    assert AuditEvent.objects.get(action="tenant.updated").actor == "admin:admin"


def test_api_key_is_shown_once_when_made_in_the_admin_and_can_be_revoked(admin_client, tenant):
    response = admin_client.post(url("apikey", "add"), {"tenant": tenant.pk, "name": "deploy"}, follow=True)

    shown = [str(m) for m in response.context["messages"] if "shown only this once" in str(m)]
    raw = shown[0].rsplit(" ", 1)[1]
    key = services.apikey_authenticate(raw)
    assert key is not None and key.tenant == tenant and key.name == "deploy"
    assert raw not in admin_client.get(url("apikey", "change", key.pk)).content.decode()

    admin_client.post(url("apikey", "changelist"), {"action": "revoke_keys", "_selected_action": [key.pk]})
    assert services.apikey_authenticate(raw) is None


@pytest.mark.parametrize("name", ["deploy\u202e", "deploy\u2028admin", "a\u0007b"])
def test_add_api_key_refuses_a_name_with_hidden_characters_on_its_field(admin_client, tenant, name):
    response = admin_client.post(url("apikey", "add"), {"tenant": tenant.pk, "name": name})

    assert response.status_code == 200
    assert "must not contain the character" in str(response.context["adminform"].form.errors["name"])
    assert not ApiKey.objects.exists()


def test_add_api_key_over_the_tenant_s_cap_is_refused_on_the_tenant_field(admin_client, tenant, settings):
    settings.CRONFLEET_MAX_API_KEYS_PER_TENANT = 1
    services.apikey_create(tenant=tenant, name="first")

    response = admin_client.post(url("apikey", "add"), {"tenant": tenant.pk, "name": "second"})
    staff = admin_client.post(url("apikey", "add"), {"tenant": "", "name": "staff"})

    assert response.status_code == 200
    assert "(1, CRONFLEET_MAX_API_KEYS_PER_TENANT)" in str(response.context["adminform"].form.errors["tenant"])
    assert staff.status_code == 302  # staff keys are not counted
    assert list(ApiKey.objects.order_by("id").values_list("name", flat=True)) == ["first", "staff"]


def test_job_change_page_keeps_the_description_s_line_breaks_and_refuses_a_bidi_override(admin_client, job):
    saved = admin_client.post(url("job", "change", job.pk), change_form(job, description="one\r\ntwo"))
    refused = admin_client.post(url("job", "change", job.pk), change_form(job, description="one\u2067two"))

    assert saved.status_code == 302
    assert refused.status_code == 200
    assert "U+2067" in str(refused.context["adminform"].form.errors["description"])
    job.refresh_from_db()
    assert (job.description, job.version) == ("one\ntwo", 2)


def test_list_pages_do_not_query_per_row(admin_client, tenant):
    def queries(path: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(path).status_code == 200
        return len(captured)

    def add_jobs(count: int, offset: int) -> None:
        for n in range(count):
            job = services.job_create(tenant, services.JobSpec(name=f"j{offset + n}", task_name=TASK, every=60))
            run = JobRun.objects.create(job=job, tenant=tenant, scheduled_at=BASE, created_at=BASE)
            AuditEvent.objects.create(tenant=tenant, job=job, job_name=job.name, run_id=run.id, action="run.started")

    paths = [url(m, "changelist") for m in ("tenant", "job", "jobrun", "auditevent")]
    add_jobs(2, 0)
    few = [queries(path) for path in paths]
    add_jobs(15, 100)
    assert [queries(path) for path in paths] == few


# --- actions --------------------------------------------------------------------------


def test_pause_and_resume_actions(admin_client, admin_user, job, tenant):
    other = services.job_create(tenant, services.JobSpec(name="other", task_name=TASK, every=30))

    post_action(admin_client, "pause_jobs", job, other)
    job.refresh_from_db(), other.refresh_from_db()
    assert (job.enabled, other.enabled) == (False, False)
    assert job.paused_note == f"paused in the admin by {admin_user.username}"

    response = post_action(admin_client, "resume_jobs", job)
    job.refresh_from_db(), other.refresh_from_db()
    assert (job.enabled, other.enabled) == (True, False)
    assert "Resumed 1 job(s)." in response.content.decode()
    actors = set(AuditEvent.objects.filter(action__in=["job.paused", "job.resumed"]).values_list("actor", flat=True))
    assert actors == {f"admin:{admin_user.username}"}


def test_trigger_action_records_a_manual_queued_run(admin_client, admin_user, job, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = post_action(admin_client, "trigger_jobs", job)

    run = JobRun.objects.get()
    assert (run.job_id, run.trigger, run.state) == (job.pk, Trigger.MANUAL, RunState.QUEUED)
    assert f"Triggered 1 job(s): run(s) {run.pk}." in response.content.decode()
    assert len(callbacks) == 1
    assert AuditEvent.objects.get(action="job.triggered").actor == f"admin:{admin_user.username}"


def test_actions_need_the_change_job_permission(client, django_user_model, job):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)

    response = client.get(url("job", "changelist"))
    assert response.status_code == 200
    assert "pause_jobs" not in response.content.decode()
    post_action(client, "pause_jobs", job)
    job.refresh_from_db()
    assert job.enabled


def test_delete_job_goes_through_the_service(admin_client, admin_user, runs, job):
    page = admin_client.get(url("job", "delete", job.pk))
    assert page.status_code == 200
    assert "with all its runs" in page.content.decode()

    response = admin_client.post(url("job", "delete", job.pk), {"post": "yes"})

    assert response.status_code == 302
    assert not Job.objects.exists() and not JobRun.objects.exists()
    event = AuditEvent.objects.get(action="job.deleted")
    assert (event.job_name, event.actor, event.job_id) == ("nightly", f"admin:{admin_user.username}", None)


# --- read-only ledger and audit trail -------------------------------------------------


def test_runs_and_audit_events_are_read_only(admin_client, runs):
    run = runs[0]
    event = AuditEvent.objects.get(action="run.dead")

    assert admin_client.get(url("jobrun", "add")).status_code == 403
    assert admin_client.get(url("jobrun", "delete", run.pk)).status_code == 403
    assert admin_client.post(url("jobrun", "change", run.pk), {"state": "succeeded"}).status_code == 403
    assert admin_client.get(url("auditevent", "add")).status_code == 403
    assert admin_client.get(url("auditevent", "delete", event.pk)).status_code == 403
    assert admin_client.get(url("tenant", "delete", run.tenant_id)).status_code == 403
    changelist = admin_client.get(url("jobrun", "changelist")).content.decode()
    assert "delete_selected" not in changelist
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    assert JobRun.objects.count() == 3


def test_run_changelist_lists_newest_first_without_counting_the_table(admin_client, runs):
    response = admin_client.get(url("jobrun", "changelist"))

    cl = response.context["cl"]
    assert [r.pk for r in cl.result_list] == [r.pk for r in reversed(runs)]
    assert cl.model_admin.show_full_result_count is False
    html = response.content.decode()
    assert "acme/nightly" in html and "coalesced" in html and "boom" in html


def test_ledger_lists_never_compute_facet_counts(admin_client, runs):
    for model in ("job", "jobrun", "auditevent"):
        response = admin_client.get(f"{url(model, 'changelist')}?_facets=True")
        assert response.status_code == 200
        assert response.context["cl"].add_facets is False, model


@pytest.mark.django_db(transaction=True)
def test_trigger_action_reports_a_run_the_broker_did_not_take(admin_client, monkeypatch):
    job = services.job_create(
        services.tenant_create(slug="acme"), services.JobSpec(name="nightly", task_name=TASK, cron="0 9 * * *")
    )

    def broker_down(messages):
        raise ConnectionError("Connection refused")

    monkeypatch.setattr("scheduler_app.services.jobs.publish_runs", broker_down)
    response = post_action(admin_client, "trigger_jobs", job)

    run = JobRun.objects.get()
    html = response.content.decode()
    assert f"Run {run.pk} of acme/nightly is recorded but was not sent to the broker: Connection refused" in html
    assert f"Triggered 1 job(s): run(s) {run.pk}." in html
