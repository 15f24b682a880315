"""The admin as staff users who are not superusers: the dashboard and the job console show
runs, failing jobs and alerts' texts only to those who may view them; a tenant's quotas and
retention need change_tenant_quotas; making an API key needs mint_apikey (a staff key a
superuser); revoking one needs change_apikey (docs/roles.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from scheduler_app import alerts, services
from scheduler_app.models import Alert, ApiKey, JobRun, RunState, Tenant, db_now

TASK = "scheduler_app.echo"
SECRET_ALERT = "alert-text-for-viewers-only"
SECRET_ERROR = "run-error-for-viewers-only"
# What the dashboard shows (scheduler_app/admin/dashboard.py's DASHBOARD_PERMISSIONS).
DASHBOARD_VIEWS = ("view_jobrun", "view_job", "view_alert", "view_tenant", "view_node")


@pytest.fixture
def failing(db):
    """A tenant's job with a dead run (its error) and an alert (its text), raised just now."""
    tenant = services.tenant_create(slug="acme", name="Acme")
    job = services.job_create(tenant, services.JobSpec(name="nightly", task_name=TASK, cron="0 9 * * *"))
    now = db_now()
    JobRun.objects.create(
        job=job,
        tenant=tenant,
        scheduled_at=now - timedelta(minutes=10),
        created_at=now,
        started_at=now - timedelta(minutes=9),
        finished_at=now - timedelta(minutes=8),
        state=RunState.DEAD,
        error=SECRET_ERROR,
    )
    rule = alerts.rule_set(job, {"on_failure": True})
    Alert.objects.create(
        rule=rule,
        job=job,
        tenant=tenant,
        kind="dead",
        dedup_key="dead-1",
        message=SECRET_ALERT,
        raised_at=now,
        next_delivery_at=now,
    )
    return job


def login(client, *codenames: str) -> User:
    user = User.objects.create_user(f"staff{User.objects.count()}", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="scheduler_app", codename__in=codenames)
    )
    client.force_login(user)
    return user


@pytest.mark.parametrize("held", [[], ["view_job"], ["view_job", "view_jobrun", "view_tenant", "view_node"]])
def test_the_dashboard_refuses_staff_without_its_view_permissions_and_says_which(client, failing, held):
    login(client, *held)

    response = client.get(reverse("cronfleet:dashboard"))

    html = response.content.decode()
    assert response.status_code == 403
    assert SECRET_ALERT not in html and "acme/nightly" not in html
    assert "scheduler_app.view_alert" in html  # named as missing


def test_the_dashboard_shows_its_panels_to_staff_with_its_view_permissions(client, failing):
    login(client, *DASHBOARD_VIEWS)

    response = client.get(reverse("cronfleet:dashboard"))

    assert response.status_code == 200
    assert SECRET_ALERT in response.content.decode() and "acme/nightly" in response.content.decode()


def test_the_job_page_shows_runs_and_alerts_only_to_staff_who_may_view_them(client, failing):
    page = reverse("admin:scheduler_app_job_change", args=[failing.pk])
    login(client, "view_job")

    hidden = client.get(page).content.decode()
    login(client, "view_job", "view_jobrun", "view_alertrule", "view_alert")
    shown = client.get(page).content.decode()

    assert SECRET_ALERT not in hidden and SECRET_ERROR not in hidden and 'id="cf-recent"' not in hidden
    assert SECRET_ALERT in shown and SECRET_ERROR in shown


TENANT_FORM = {
    "name": "Acme",
    "timezone": "UTC",
    "is_active": "on",
    "max_jobs": "5",
    "min_interval_seconds": "0",
    "max_fires_per_minute": "",
    "max_concurrent_runs": "",
    "weight": "7",
    "api_requests_per_minute": "",
    "retention_days": "1000",
    "retention_failed_days": "",
    "retention_keep_last": "",
}


def test_a_tenant_s_quotas_and_retention_are_read_only_without_change_tenant_quotas(client, failing):
    tenant = failing.tenant
    login(client, "view_tenant", "change_tenant")

    response = client.post(
        reverse("admin:scheduler_app_tenant_change", args=[tenant.pk]), {**TENANT_FORM, "name": "Acme renamed"}
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    tenant.refresh_from_db()
    assert (tenant.name, tenant.max_jobs, tenant.weight, tenant.retention_days) == ("Acme renamed", None, 1, None)


def test_a_tenant_s_quotas_and_retention_change_with_change_tenant_quotas(client, failing):
    tenant = failing.tenant
    login(client, "view_tenant", "change_tenant", "change_tenant_quotas")

    response = client.post(reverse("admin:scheduler_app_tenant_change", args=[tenant.pk]), TENANT_FORM)

    assert response.status_code == 302, response.content.decode()[:2000]
    tenant.refresh_from_db()
    assert (tenant.max_jobs, tenant.weight, tenant.retention_days) == (5, 7, 1000)


def test_making_an_api_key_in_the_admin_needs_mint_apikey(client, failing):
    login(client, "view_apikey", "add_apikey")

    page = client.get(reverse("admin:scheduler_app_apikey_add"))
    posted = client.post(reverse("admin:scheduler_app_apikey_add"), {"tenant": failing.tenant.pk, "name": "stolen"})

    assert (page.status_code, posted.status_code) == (403, 403)
    assert not ApiKey.objects.exists()


def test_a_staff_key_is_made_by_superusers_only(client, admin_client, failing):
    login(client, "view_apikey", "add_apikey", "mint_apikey", "view_tenant")
    add = reverse("admin:scheduler_app_apikey_add")

    refused = client.post(add, {"tenant": "", "name": "master"})
    tenant_key = client.post(add, {"tenant": failing.tenant.pk, "name": "deploy"})
    by_superuser = admin_client.post(add, {"tenant": "", "name": "ops"})

    assert refused.status_code == 200
    assert "Only a superuser makes a staff key" in str(refused.context["adminform"].form.errors["tenant"])
    assert (tenant_key.status_code, by_superuser.status_code) == (302, 302)
    assert sorted(ApiKey.objects.values_list("name", "tenant__slug")) == [("deploy", "acme"), ("ops", None)]


def test_revoking_a_key_in_the_admin_needs_change_apikey(client, failing):
    key, raw = services.apikey_create(tenant=failing.tenant, name="deploy")
    changelist = reverse("admin:scheduler_app_apikey_changelist")
    login(client, "view_apikey")

    client.post(changelist, {"action": "revoke_keys", "_selected_action": [key.pk]})
    still = services.apikey_authenticate(raw)
    login(client, "view_apikey", "change_apikey")
    client.post(changelist, {"action": "revoke_keys", "_selected_action": [key.pk]})

    assert still is not None
    assert services.apikey_authenticate(raw) is None
    assert Tenant.objects.count() == 1
