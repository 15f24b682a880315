"""Bounds a tenant meets with no quota of its own (issue 40 item 6): manual runs per hour
(CRONFLEET_MANUAL_RUNS_PER_HOUR, or the tenant's own manual_runs_per_hour), and other
tenants' planned fires in a queue-scoped window's placement and its rebalance, through the
services, the API, the CLI, the admin and tenant documents. Another tenant's queue:
test_queue_tenants.py."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.conf import app_settings
from scheduler_app.models import AuditEvent, JobRun, RunState, Tenant, db_now
from scheduler_app.services import tenantmove


def client_for(tenant: Tenant | None, **headers: str) -> APIClient:
    """An API client with a fresh key of `tenant` (None: a staff key)."""
    _, raw = services.apikey_create(tenant=tenant, name="test key")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}", **headers)
    return client


def backfill(job, fires: int):
    """Backfill the `fires` latest past fires of an every-second job."""
    end = db_now().replace(microsecond=0) - timedelta(seconds=1)
    return services.job_backfill(job, start=end - timedelta(seconds=fires - 1), end=end, dry_run=False)


@pytest.fixture
def every_second(make_job):
    return make_job(cron="", every_seconds=1)


def test_manual_runs_per_hour_has_a_default_bound():
    assert app_settings.MANUAL_RUNS_PER_HOUR == 1000


def test_a_backfill_past_the_hourly_bound_is_refused_whole(db, settings, every_second):
    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 10
    backfill(every_second, 8)

    with pytest.raises(services.QuotaExceeded) as refused:
        backfill(every_second, 20)  # 12 missing fires: 8 + 12 > 10

    assert refused.value.field == "tenant"
    assert "CRONFLEET_MANUAL_RUNS_PER_HOUR" in refused.value.message
    assert "recorded 8 manual runs" in refused.value.message
    assert JobRun.objects.filter(job=every_second).count() == 8  # nothing of the refused one
    backfill(every_second, 10)  # two missing fires still fit


def test_triggers_and_replays_count_against_the_bound(db, settings, every_second):
    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 3
    first = services.job_trigger(every_second)
    services.job_trigger(every_second)
    JobRun.objects.filter(id=first.id).update(state=RunState.FAILED)
    services.run_replay(first)

    with pytest.raises(services.QuotaExceeded):
        services.job_trigger(every_second)
    JobRun.objects.filter(id=first.id).update(state=RunState.DEAD)
    with pytest.raises(services.QuotaExceeded):
        services.run_replay(first)

    assert JobRun.objects.filter(job=every_second).count() == 2
    assert JobRun.objects.get(id=first.id).state == RunState.DEAD  # the refused replay changed nothing


def test_only_the_last_hour_counts_and_deleting_the_job_resets_nothing(db, settings, tenant, make_job):
    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 2
    job = make_job(cron="", every_seconds=1)
    services.job_trigger(job)
    services.job_trigger(job)
    job.delete()  # its runs go; the audit rows that counted them stay
    again = make_job(cron="", every_seconds=1)

    with pytest.raises(services.QuotaExceeded):
        services.job_trigger(again)
    AuditEvent.objects.filter(tenant=tenant).update(created_at=db_now() - timedelta(minutes=61))
    services.job_trigger(again)


def test_other_tenants_and_zero_are_unbounded(db, settings, make_job, every_second):
    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 1
    services.job_trigger(every_second)
    other = make_job(tenant=Tenant.objects.create(slug="other", name="other"), cron="", every_seconds=1)
    services.job_trigger(other)

    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 0
    backfill(every_second, 50)


def test_the_api_answers_403_naming_the_setting(db, settings, tenant, every_second):
    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 1
    api = client_for(tenant)
    assert api.post(f"/api/v1/jobs/{every_second.id}/trigger/").status_code == 201

    refused = api.post(f"/api/v1/jobs/{every_second.id}/trigger/")
    end = db_now().replace(microsecond=0) - timedelta(seconds=1)
    body = {"start": (end - timedelta(seconds=4)).isoformat(), "end": end.isoformat(), "dry_run": False}
    refused_backfill = api.post(f"/api/v1/jobs/{every_second.id}/backfill/", body, format="json")

    assert refused.status_code == 403, refused.json()
    [error] = refused.json()["errors"]
    assert error["field"] == "tenant" and "CRONFLEET_MANUAL_RUNS_PER_HOUR" in error["message"]
    assert refused_backfill.status_code == 403, refused_backfill.json()
    assert JobRun.objects.filter(job=every_second).count() == 1


@pytest.fixture
def other_tenant(db) -> Tenant:
    return Tenant.objects.create(slug="other", name="other")


QUEUE_WINDOW = {"schedule": {"window": "daily 01:00-01:02", "scope": "queue"}, "count": 1}


def test_a_tenants_queue_scoped_preview_tells_only_its_own_jobs_counts(db, tenant, other_tenant):
    for n in range(4):  # the other tenant's fixed jobs at 01:00 (one at 01:01), on the shared default queue
        services.job_create(
            other_tenant, services.JobSpec(name=f"a{n}", cron="0 1 * * *", task_name="scheduler_app.echo")
        )
    services.job_create(other_tenant, services.JobSpec(name="b", cron="1 1 * * *", task_name="scheduler_app.echo"))

    preview = client_for(tenant).post("/api/v1/preview/", QUEUE_WINDOW, format="json")

    assert preview.status_code == 200, preview.json()
    note = preview.json()["placement"]
    assert note.startswith("01:01 ")  # still chosen away from the queue's load
    assert "of this tenant's jobs, 0 planned fires in that minute (busiest: 0)" in note, note


def test_a_staff_queue_scoped_preview_still_tells_the_whole_queue(db, tenant, other_tenant):
    for n in range(4):
        services.job_create(
            other_tenant, services.JobSpec(name=f"a{n}", cron="0 1 * * *", task_name="scheduler_app.echo")
        )

    staff = client_for(None, HTTP_X_CRONFLEET_TENANT=tenant.slug)
    preview = staff.post("/api/v1/preview/", QUEUE_WINDOW, format="json")

    assert preview.status_code == 200, preview.json()
    assert "busiest: 0" not in preview.json()["placement"] and "the default queue" in preview.json()["placement"]


def test_a_queue_scoped_job_stores_a_note_without_other_tenants_counts(db, tenant, other_tenant):
    for n in range(4):
        services.job_create(
            other_tenant, services.JobSpec(name=f"a{n}", cron="0 1 * * *", task_name="scheduler_app.echo")
        )

    job = services.job_create(
        tenant,
        services.JobSpec(
            name="flex", flex_window="daily 01:00-01:02", flex_scope="queue", task_name="scheduler_app.echo"
        ),
    )

    assert job.cron == "1 1 * * *"
    assert job.flex_note.endswith("of this tenant's jobs, 0 planned fires in that minute (busiest: 0)"), job.flex_note


# --- a tenant's own bound on manual runs (Tenant.manual_runs_per_hour) ----------------------


def test_a_tenants_own_manual_runs_per_hour_overrides_the_setting(db, settings, tenant, every_second):
    services.tenant_update(tenant, {"manual_runs_per_hour": 2})
    services.job_trigger(every_second)
    services.job_trigger(every_second)

    with pytest.raises(services.QuotaExceeded) as refused:
        services.job_trigger(every_second)

    assert "its bound of 2 per hour (the tenant's manual_runs_per_hour)" in refused.value.message
    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 1
    services.tenant_update(tenant, {"manual_runs_per_hour": 0})  # 0: unbounded, whatever the setting
    backfill(every_second, 20)
    services.tenant_update(tenant, {"manual_runs_per_hour": None})  # null: the setting's again
    with pytest.raises(services.QuotaExceeded) as again:
        services.job_trigger(every_second)
    assert "CRONFLEET_MANUAL_RUNS_PER_HOUR" in again.value.message


def test_the_cli_sets_and_clears_a_tenants_manual_runs_per_hour(db, tenant):
    out = io.StringIO()
    call_command("tenants", "set", tenant.slug, "--manual-runs-per-hour", "5", stdout=out)

    assert "manual-runs-per-hour" in out.getvalue()
    assert Tenant.objects.get(id=tenant.id).manual_runs_per_hour == 5
    call_command("tenants", "set", tenant.slug, "--manual-runs-per-hour", "none", stdout=io.StringIO())
    assert Tenant.objects.get(id=tenant.id).manual_runs_per_hour is None


def test_the_tenant_endpoint_sets_it_for_staff_only(db, tenant):
    staff, own = client_for(None), client_for(tenant)
    url = f"/api/v1/tenants/{tenant.slug}/"

    changed = staff.patch(url, {"manual_runs_per_hour": 5}, format="json")
    refused = own.patch(url, {"manual_runs_per_hour": 0}, format="json")
    negative = staff.patch(url, {"manual_runs_per_hour": -1}, format="json")

    assert changed.status_code == 200 and changed.json()["manual_runs_per_hour"] == 5
    assert refused.status_code == 403
    assert negative.status_code == 400 and negative.json()["errors"][0]["field"] == "manual_runs_per_hour"
    assert own.get("/api/v1/me/").json()["tenant"]["manual_runs_per_hour"] == 5
    assert AuditEvent.objects.get(action="tenant.updated").detail["changes"] == {"manual_runs_per_hour": [None, 5]}


def test_the_admins_tenant_page_sets_it(admin_client, tenant):
    data = {"name": tenant.name, "timezone": tenant.timezone, "is_active": "on", "min_interval_seconds": "0"}
    data.update(weight="1", manual_runs_per_hour="7")

    response = admin_client.post(reverse("admin:scheduler_app_tenant_change", args=[tenant.pk]), data)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Tenant.objects.get(id=tenant.id).manual_runs_per_hour == 7


def test_a_tenant_document_carries_it_and_an_import_holds_it_to_its_bounds(db, tenant):
    services.tenant_update(tenant, {"manual_runs_per_hour": 7})
    written: list[dict] = []
    services.tenant_export(tenant, db_now() + timedelta(days=1), write=written.append, actor="test")
    document = json.loads(tenantmove.dumps(written[0]))
    document["tenant"]["slug"] = "moved"
    tampered = {**document, "tenant": {**document["tenant"], "slug": "tampered", "manual_runs_per_hour": 10**9}}

    with pytest.raises(services.InvalidInput) as refused:
        tenantmove.tenant_import(tampered, actor="test")
    moved = tenantmove.tenant_import(document, actor="test")

    assert refused.value.field == "tenant 'tampered': manual_runs_per_hour"
    assert moved.manual_runs_per_hour == 7


# --- jobs rebalance: the notes it stores ------------------------------------------------------


def test_a_rebalance_stores_notes_that_tell_a_tenant_only_its_own_counts(db, tenant, other_tenant):
    window = {"flex_window": "daily 01:00-01:02", "flex_scope": "queue", "task_name": "scheduler_app.echo"}
    mine = services.job_create(tenant, services.JobSpec(name="flex", **window))
    minute = mine.cron.split()[0]
    for n in range(4):  # the other tenant's fixed jobs land on the minute mine took, on the shared queue
        services.job_create(
            other_tenant, services.JobSpec(name=f"a{n}", cron=f"{minute} 1 * * *", task_name="scheduler_app.echo")
        )

    [move] = services.jobs_rebalance(queue="", actor="test")

    assert move.moved  # away from the other tenant's load
    mine.refresh_from_db()
    assert "of this tenant's jobs, 0 planned fires in that minute (busiest: 0)" in mine.flex_note, mine.flex_note
    why = client_for(tenant).get(f"/api/v1/jobs/{mine.id}/").json()["schedule"]["why"]
    audited = AuditEvent.objects.get(action="job.rebalanced").detail["note"]
    assert why == audited == mine.flex_note
