"""Maintenance windows: the services (checks naming the field), the beat (fires skipped or
deferred to the window's end as one run, selected by tag and target kind, a tenant's and the
deployment's windows, one query a turn), a `cancel` window cancelling running runs, the API
(tenant isolation, deployment-wide windows for staff only), the CLI, the admin and the
dashboard. The times alone (one-off, recurring in a zone across DST):
tests/unit/schedules/test_windows.py; a real beat and worker: tests/system/schedules/test_windows.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from rest_framework.test import APIClient

from scheduler_app import dispatch, services
from scheduler_app.dispatch.windows import cancel_in_windows, turn_windows
from scheduler_app.models import AuditEvent, Job, JobRun, MaintenanceWindow, RunState, db_now
from scheduler_app.services.windows import window_create, window_delete, window_update
from tests.conftest import utc
from tests.unit.schedules.test_windows import LONDON

GRACE = timedelta(seconds=60)


def dispatch_at(now: datetime):
    return dispatch.dispatch_due_jobs(now, limit=100, grace=GRACE)


def runs_of(job: Job) -> list[tuple[datetime, str, str]]:
    return list(JobRun.objects.filter(job=job).order_by("scheduled_at").values_list("scheduled_at", "state", "reason"))


# --- services -----------------------------------------------------------------------------

ONE_OFF = {"starts_at": "2026-06-01T10:00:00Z", "ends_at": "2026-06-01T11:00:00Z"}


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        (
            {"starts_at": "2026-06-01T11:00:00Z", "ends_at": "2026-06-01T10:00:00Z"},
            "ends_at",
            "must be after starts_at",
        ),
        ({"starts_at": "2026-06-01T10:00:00Z"}, "ends_at", "needs ends_at"),
        ({}, "starts_at", "needs starts_at and ends_at"),
        ({"starts_at": "soon", "ends_at": "later"}, "starts_at", "not an ISO 8601"),
        ({"cron": "0 25 * * *", "duration_minutes": 60}, "cron", "0 25 * * *"),
        ({"cron": "0 2 * * 6"}, "duration_minutes", "whole number of minutes"),
        ({"cron": "0 2 * * 6", "duration_minutes": 60, **ONE_OFF}, "starts_at", "give one or the other"),
        ({**ONE_OFF, "duration_minutes": 60}, "duration_minutes", "only a recurring window"),
        ({**ONE_OFF, "zone": "Europe/Londn"}, "zone", "did you mean Europe/London"),
        ({**ONE_OFF, "action": "postpone"}, "action", "'postpone' is not one of skip, defer"),
        ({**ONE_OFF, "running_policy": "kill"}, "running_policy", "let_finish, cancel"),
        ({**ONE_OFF, "target_kinds": ["ftp"]}, "target_kinds", "'ftp' is not one of task, http"),
        ({**ONE_OFF, "tags": "db"}, "tags", "must be a list"),
        ({**ONE_OFF, "colour": "red"}, "colour", "is not a maintenance window field"),
    ],
)
def test_window_create_refuses_bad_input_naming_the_field(tenant, fields, field, says):
    with pytest.raises(services.InvalidInput) as caught:
        window_create(tenant, name="bad", **fields)

    assert caught.value.field == field
    assert says in caught.value.message
    assert not MaintenanceWindow.objects.exists()


def test_a_second_window_of_one_name_is_refused_per_tenant_and_deployment_wide(tenant):
    window_create(tenant, name="w", **ONE_OFF)
    window_create(None, name="w", **ONE_OFF)  # the deployment's names are its own
    for owner in (tenant, None):
        with pytest.raises(services.InvalidInput) as caught:
            window_create(owner, name="w", **ONE_OFF)
        assert caught.value.field == "name"


def test_times_without_an_offset_are_read_in_the_windows_zone_and_writes_are_audited(tenant):
    window = window_create(tenant, name="w", zone=LONDON, starts_at="2026-06-01T10:00", ends_at="2026-06-01T11:00")
    assert window.starts_at == utc(2026, 6, 1, 9)  # British Summer Time
    window = window_update(window, cron="0 1 * * 6", duration_minutes=90, actor="test")
    assert (window.starts_at, window.ends_at, window.cron) == (None, None, "0 1 * * 6")
    window_delete(window, actor="test")
    assert list(AuditEvent.objects.filter(tenant=tenant).order_by("id").values_list("action", flat=True)) == [
        "window.created",
        "window.updated",
        "window.deleted",
    ]


# --- the beat ------------------------------------------------------------------------------


def test_a_skip_window_records_the_fires_inside_it_as_skipped_with_its_name(tenant, make_job):
    window_create(tenant, name="db upgrade", tags=["db"], **ONE_OFF)
    inside = make_job(cron="*/30 * * * *", tags=["db", "nightly"], next_run_at=utc(2026, 6, 1, 10, 30))
    untagged = make_job(cron="*/30 * * * *", next_run_at=utc(2026, 6, 1, 10, 30))

    dispatch_at(utc(2026, 6, 1, 10, 30, 5))

    assert runs_of(inside) == [(utc(2026, 6, 1, 10, 30), RunState.SKIPPED, "maintenance: db upgrade")]
    assert runs_of(untagged) == [(utc(2026, 6, 1, 10, 30), RunState.QUEUED, "")]
    inside.refresh_from_db()
    assert inside.next_run_at == utc(2026, 6, 1, 11)  # the schedule goes on; 11:00 is outside the window
    dispatch_at(utc(2026, 6, 1, 11, 0, 5))
    assert runs_of(inside)[-1] == (utc(2026, 6, 1, 11), RunState.QUEUED, "")


def test_a_defer_window_skips_the_fires_inside_and_makes_one_run_at_its_end(tenant, make_job):
    window_create(
        tenant, name="etl freeze", action="defer", starts_at="2026-06-01T10:10:00Z", ends_at="2026-06-01T11:05:00Z"
    )
    job = make_job(cron="*/25 * * * *", next_run_at=utc(2026, 6, 1, 10, 25))
    deferred = "maintenance: etl freeze: deferred to 2026-06-01T11:05:00+00:00"

    dispatch_at(utc(2026, 6, 1, 10, 25, 1))
    job.refresh_from_db()
    assert job.next_run_at == utc(2026, 6, 1, 10, 50)  # still inside: it is recorded when due
    dispatch_at(utc(2026, 6, 1, 10, 50, 1))
    dispatch_at(utc(2026, 6, 1, 11, 0, 1))
    job.refresh_from_db()
    assert job.next_run_at == utc(2026, 6, 1, 11, 5)  # the scheduled 11:25 is later: the end first
    dispatch_at(utc(2026, 6, 1, 11, 5, 1))
    Job.objects.filter(id=job.id).update(next_run_at=utc(2026, 6, 1, 11, 5))  # as if a second beat planned it again
    dispatch_at(utc(2026, 6, 1, 11, 5, 2))
    dispatch_at(utc(2026, 6, 1, 11, 25, 1))

    assert runs_of(job) == [
        (utc(2026, 6, 1, 10, 25), RunState.SKIPPED, deferred),
        (utc(2026, 6, 1, 10, 50), RunState.SKIPPED, deferred),
        (utc(2026, 6, 1, 11, 0), RunState.SKIPPED, deferred),
        (utc(2026, 6, 1, 11, 5), RunState.QUEUED, ""),
        (utc(2026, 6, 1, 11, 25), RunState.QUEUED, ""),
    ]


def test_a_defer_window_that_ended_while_the_beat_was_away_runs_its_end_at_once(tenant, make_job):
    window_create(
        tenant, name="short", action="defer", starts_at="2026-06-01T10:00:00Z", ends_at="2026-06-01T10:02:00Z"
    )
    job = make_job(
        every_seconds=45, anchor_at=utc(2026, 6, 1), next_run_at=utc(2026, 6, 1, 10, 0, 45), misfire_policy="run_all"
    )

    dispatch_at(utc(2026, 6, 1, 10, 3, 30))

    assert [(at, state) for at, state, _ in runs_of(job)] == [
        (utc(2026, 6, 1, 10, 0, 45), RunState.SKIPPED),
        (utc(2026, 6, 1, 10, 1, 30), RunState.SKIPPED),
        (utc(2026, 6, 1, 10, 2), RunState.QUEUED),
        (utc(2026, 6, 1, 10, 2, 15), RunState.QUEUED),
        (utc(2026, 6, 1, 10, 3), RunState.QUEUED),
    ]


def test_target_kinds_tenants_and_deployment_wide_windows_select_jobs(tenant, make_job):
    other = services.tenant_create(slug="other", name="Other")
    window_create(tenant, name="http only", target_kinds=["http"], **ONE_OFF)
    window_create(None, name="all hands", starts_at="2026-06-01T12:00:00Z", ends_at="2026-06-01T13:00:00Z")
    task = make_job(cron="*/30 * * * *", next_run_at=utc(2026, 6, 1, 10, 30))
    http = make_job(
        cron="*/30 * * * *",
        next_run_at=utc(2026, 6, 1, 10, 30),
        target_kind="http",
        target_config={"method": "GET", "url": "https://example.com/"},
    )
    elsewhere = make_job(
        tenant=other,
        target_kind="http",
        cron="*/30 * * * *",
        next_run_at=utc(2026, 6, 1, 10, 30),
        target_config={"method": "GET", "url": "https://example.com/"},
    )

    dispatch_at(utc(2026, 6, 1, 10, 30, 5))
    assert [runs_of(job)[0][1] for job in (task, http, elsewhere)] == [
        RunState.QUEUED,
        RunState.SKIPPED,
        RunState.QUEUED,
    ]
    Job.objects.filter(id__in=[task.id, http.id, elsewhere.id]).update(next_run_at=utc(2026, 6, 1, 12, 30))
    dispatch_at(utc(2026, 6, 1, 12, 30, 5))
    assert {runs_of(job)[-1][2] for job in (task, http, elsewhere)} == {"maintenance: all hands"}


def test_a_turn_reads_the_windows_in_one_query_and_none_apply_when_disabled(
    tenant, make_job, django_assert_num_queries
):
    window = window_create(tenant, name="w", tags=["db"], **ONE_OFF)
    now = utc(2026, 6, 1, 10, 30)
    with django_assert_num_queries(1):
        found = turn_windows(now)
    assert [w.name for w in found] == ["w"]
    assert turn_windows(now)[0] is found[0]  # built once per id and updated_at
    window_update(window, enabled=False)
    job = make_job(cron="*/30 * * * *", tags=["db"], next_run_at=now)
    dispatch_at(now)
    assert runs_of(job)[0][1] == RunState.QUEUED


def test_an_open_cancel_window_cancels_the_running_runs_of_its_jobs_only(tenant, make_job, make_run):
    now = db_now()
    window_create(
        tenant,
        name="reindex",
        tags=["db"],
        running_policy="cancel",
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(minutes=5),
    )
    window_create(
        tenant, name="polite", tags=["web"], starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(minutes=5)
    )
    db_run = make_run(make_job(tags=["db"]), state=RunState.RUNNING, started_at=now)
    web_run = make_run(make_job(tags=["web"]), state=RunState.RUNNING, started_at=now)
    queued = make_run(make_job(tags=["db"]), state=RunState.QUEUED)

    assert cancel_in_windows(turn_windows(now), now) == 1

    db_run.refresh_from_db()
    assert db_run.state == RunState.CANCELLED
    assert db_run.reason.startswith("maintenance: reindex: cancelled, the window is open until ")
    assert JobRun.objects.get(id=web_run.id).state == RunState.RUNNING  # let_finish
    assert JobRun.objects.get(id=queued.id).state == RunState.QUEUED
    assert AuditEvent.objects.filter(run_id=db_run.id, action="run.cancelled", actor="beat").exists()


# --- API ------------------------------------------------------------------------------------


def client_of(tenant=None, *, staff: bool = False) -> APIClient:
    _, raw = services.apikey_create(tenant=None if staff else tenant, name="test key")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


BODY = {
    "name": "db-upgrade",
    "starts_at": "2030-06-01T10:00:00Z",
    "ends_at": "2030-06-01T11:00:00Z",
    "action": "defer",
    "tags": ["db"],
    "target_kinds": ["task"],
}


def test_the_api_makes_lists_changes_and_deletes_a_window(tenant):
    api = client_of(tenant)

    made = api.post("/api/v1/windows/", BODY, format="json")
    assert made.status_code == 201, made.json()
    assert (made.json()["tenant"], made.json()["action"], made.json()["tags"]) == (tenant.slug, "defer", ["db"])
    assert [w["name"] for w in api.get("/api/v1/windows/").json()["results"]] == ["db-upgrade"]
    url = f"/api/v1/windows/{made.json()['id']}/"
    changed = api.patch(url, {"cron": "0 2 * * 0", "zone": LONDON, "duration_minutes": 120}, format="json")
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["starts_at"], changed.json()["cron"]) == (None, "0 2 * * 0")
    assert changed.json()["next_opening"] is not None and changed.json()["open_until"] is None
    assert api.delete(url).status_code == 204
    assert not MaintenanceWindow.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "ends_at": "2030-06-01T09:00:00Z"}, "ends_at"),
        ({**BODY, "zone": "Mars/Olympus"}, "zone"),
        ({**BODY, "action": "later"}, "action"),
        ({**BODY, "colour": "red"}, "colour"),
    ],
)
def test_the_api_refuses_bad_input_naming_the_field(tenant, body, field):
    response = client_of(tenant).post("/api/v1/windows/", body, format="json")

    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == [field]


def test_the_api_refuses_a_window_already_over_and_the_admin_warns_of_one(tenant, admin_client):
    over = {**BODY, "starts_at": "2020-06-01T10:00:00Z", "ends_at": "2020-06-01T11:00:00Z"}

    response = client_of(tenant).post("/api/v1/windows/", over, format="json")

    assert response.status_code == 400
    assert [(e["field"], "already over" in e["message"]) for e in response.json()["errors"]] == [("ends_at", True)]
    assert not MaintenanceWindow.objects.exists()
    add = reverse("admin:scheduler_app_maintenancewindow_add")
    made = admin_client.post(
        add, admin_form(tenant, starts_at="2020-01-01T10:00:00Z", ends_at="2020-01-01T11:00:00Z"), follow=True
    )
    shown = [str(message) for message in made.context["messages"]]
    assert any("is already over (it ended 2020-01-01 11:00 UTC)" in message for message in shown), shown
    assert MaintenanceWindow.objects.filter(name="freeze").exists()  # made as asked, with the warning


def test_another_tenants_key_cannot_see_change_or_delete_a_window(tenant):
    window = window_create(tenant, name="mine", **ONE_OFF)
    api = client_of(services.tenant_create(slug="other", name="Other"))

    assert api.get("/api/v1/windows/").json()["results"] == []
    url = f"/api/v1/windows/{window.id}/"
    assert api.get(url).status_code == 404
    assert api.patch(url, {"action": "defer"}, format="json").status_code == 404
    assert api.delete(url).status_code == 404
    window.refresh_from_db()
    assert window.action == "skip"


def test_a_tenant_key_reads_the_deployments_windows_but_cannot_make_or_change_one(tenant):
    shared = window_create(None, name="all hands", **ONE_OFF)
    api = client_of(tenant)

    listed = api.get("/api/v1/windows/").json()["results"]
    assert [(w["name"], w["tenant"]) for w in listed] == [("all hands", None)]
    url = f"/api/v1/windows/{shared.id}/"
    assert api.get(url).status_code == 200
    for response in (
        api.patch(url, {"action": "defer"}, format="json"),
        api.delete(url),
        api.post("/api/v1/windows/", {**BODY, "deployment": True}, format="json"),
    ):
        assert response.status_code == 403
        assert response.json()["errors"][0]["field"] == "deployment"
    assert list(MaintenanceWindow.objects.values_list("name", "action")) == [("all hands", "skip")]


def test_a_staff_key_makes_a_deployment_window_and_a_tenants_one(tenant):
    api = client_of(staff=True)

    made = api.post("/api/v1/windows/", {**BODY, "deployment": True}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["tenant"] is None
    refused = api.post("/api/v1/windows/", BODY, format="json")
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "X-Cronfleet-Tenant"
    theirs = api.post("/api/v1/windows/", BODY, format="json", HTTP_X_CRONFLEET_TENANT=tenant.slug)
    assert theirs.status_code == 201 and theirs.json()["tenant"] == tenant.slug
    assert [w["name"] for w in api.get("/api/v1/windows/").json()["results"]] == ["db-upgrade"]  # the deployment's


# --- CLI ------------------------------------------------------------------------------------


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_the_cli_adds_lists_shows_disables_and_deletes_windows(tenant):
    added = run(
        "windows",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "sunday",
        "--cron",
        "0 2 * * 0",
        "--duration",
        "120",
        "--zone",
        LONDON,
        "--action",
        "defer",
        "--tag",
        "db",
        "--kind",
        "sql",
    )
    assert "Created maintenance window" in added and "cron 0 2 * * 0 (Europe/London) for 120 min" in added
    run(
        "windows",
        "add",
        "--deployment",
        "--name",
        "all-hands",
        "--starts-at",
        "2030-01-01T10:00:00Z",
        "--ends-at",
        "2030-01-01T11:00:00Z",
    )
    listed = run("windows", "list", "--tenant", tenant.slug)
    assert "sunday" in listed and "all-hands" in listed and "(deployment)" in listed
    assert "now: upcoming: opens Tue 2030-01-01 10:00 UTC, until Tue 2030-01-01 11:00 UTC" in run(
        "windows", "show", "all-hands"
    )
    run("windows", "disable", f"{tenant.slug}/sunday")
    assert not MaintenanceWindow.objects.get(name="sunday").enabled
    assert "Deleted" in run("windows", "delete", f"{tenant.slug}/sunday")
    assert list(MaintenanceWindow.objects.values_list("name", flat=True)) == ["all-hands"]


def test_the_cli_refuses_bad_input_naming_the_field(tenant):
    with pytest.raises(CommandError, match="windows add: ends_at: must be after starts_at"):
        run(
            "windows",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            "w",
            "--starts-at",
            "2030-01-01T10:00:00Z",
            "--ends-at",
            "2030-01-01T09:00:00Z",
        )
    with pytest.raises(CommandError, match="windows show: window: tenant .* has no maintenance window 'nope'"):
        run("windows", "show", f"{tenant.slug}/nope")


# --- admin and dashboard ----------------------------------------------------------------------


def admin_form(tenant, **fields) -> dict:
    form = {
        "tenant": tenant.pk if tenant else "",
        "name": "freeze",
        "description": "",
        "zone": "UTC",
        "starts_at": "2030-01-01T10:00:00Z",
        "ends_at": "2030-01-01T11:00:00Z",
        "cron": "",
        "duration_minutes": "",
        "action": "defer",
        "running_policy": "let_finish",
        "tags": "db, etl",
        "target_kinds": ["task"],
        "enabled": "on",
    }
    return {**form, **fields}


def test_the_admin_makes_a_window_through_the_services_and_names_the_bad_field(admin_client, tenant):
    add = reverse("admin:scheduler_app_maintenancewindow_add")
    refused = admin_client.post(add, admin_form(tenant, ends_at="2030-01-01T09:00:00Z"))
    assert refused.status_code == 200
    assert "must be after starts_at" in str(refused.context["adminform"].form.errors["ends_at"])

    made = admin_client.post(add, admin_form(tenant))
    assert made.status_code == 302, made.context["adminform"].form.errors if made.context else made
    window = MaintenanceWindow.objects.get()
    assert (window.tenant, window.tags, window.target_kinds, window.action) == (
        tenant,
        ["db", "etl"],
        ["task"],
        "defer",
    )
    assert AuditEvent.objects.filter(tenant=tenant, action="window.created", actor__startswith="admin:").exists()
    change = reverse("admin:scheduler_app_maintenancewindow_change", args=[window.pk])
    assert admin_client.get(change).status_code == 200
    changed = admin_client.post(change, admin_form(tenant, action="skip"))
    assert changed.status_code == 302
    window.refresh_from_db()
    assert window.action == "skip"


def test_the_dashboard_says_in_maintenance_until_the_end_for_the_tenants_open_windows(admin_client, tenant):
    now = db_now()
    window_create(tenant, name="db-upgrade", starts_at=now - timedelta(minutes=5), ends_at=now + timedelta(hours=1))
    window_create(tenant, name="later", starts_at=now + timedelta(hours=2), ends_at=now + timedelta(hours=3))
    other = services.tenant_create(slug="other", name="Other")

    page = admin_client.get(reverse("cronfleet:dashboard") + f"?tenant={tenant.slug}").content.decode()
    assert "In maintenance until" in page and "db-upgrade" in page
    assert "later" not in page
    elsewhere = admin_client.get(reverse("cronfleet:dashboard") + f"?tenant={other.slug}").content.decode()
    assert "In maintenance until" not in elsewhere


def test_the_admins_window_list_says_open_closed_or_upcoming_in_the_windows_zone(admin_client, tenant):
    now = db_now()
    window_create(
        tenant, name="now", zone=LONDON, starts_at=now - timedelta(minutes=5), ends_at=now + timedelta(hours=1)
    )
    window_create(tenant, name="later", starts_at="2030-06-01T10:00:00Z", ends_at="2030-06-01T11:00:00Z")
    window_create(tenant, name="past", starts_at="2020-06-01T10:00:00Z", ends_at="2020-06-01T11:00:00Z")

    html = admin_client.get(reverse("admin:scheduler_app_maintenancewindow_changelist")).content.decode()

    assert "open: until " in html
    assert "upcoming: opens Sat 2030-06-01 10:00 UTC, until Sat 2030-06-01 11:00 UTC" in html
    assert "closed: over: will not open again" in html
