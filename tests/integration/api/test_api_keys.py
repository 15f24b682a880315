"""The REST API's keys and who is calling: staff and tenant keys, the tenant header, sessions
with CSRF, quotas and inactive tenants, through the whole Django stack against the real
PostgreSQL (moved out of test_api.py, whose helpers it shares)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.utils.crypto import get_random_string
from rest_framework.test import APIClient

from scheduler_app.models import ApiKey, AuditEvent, Job, Tenant
from tests.integration.api.test_api import (  # noqa: F401 - api and tenant are fixtures
    api,
    client_for,
    create_job,
    errors_of,
    job_body,
    make_tenant,
    tenant,
)


def test_a_staff_key_makes_a_tenant_and_a_key_for_it_which_then_works_once_shown(db):
    staff = client_for(None)

    made = staff.post(
        "/api/v1/tenants/",
        {
            "slug": "acme-api",
            "name": "Acme",
            "timezone": "Europe/Berlin",
            "max_jobs": 10,
            "api_requests_per_minute": 100,
        },
        format="json",
    )
    keyed = staff.post("/api/v1/tenants/acme-api/keys/", {"name": "deploy bot"}, format="json")

    assert made.status_code == 201, made.json()
    assert made.json()["max_jobs"] == 10 and made.json()["timezone"] == "Europe/Berlin"
    assert keyed.status_code == 201, keyed.json()
    raw = keyed.json()["key"]
    assert raw.startswith(f"cf_{keyed.json()['prefix']}_")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    me = client.get("/api/v1/me").json()
    assert me["key"] == {"prefix": keyed.json()["prefix"], "name": "deploy bot", "staff": False}
    assert me["tenant"]["slug"] == "acme-api" and me["tenant"]["max_jobs"] == 10
    assert me["rate_limit"] == {"enabled": True, "requests_per_minute": 100}
    listed = client.get("/api/v1/keys/").json()
    assert [key["prefix"] for key in listed["results"]] == [keyed.json()["prefix"]]
    assert "key" not in listed["results"][0]
    assert client.get(f"/api/v1/keys/{keyed.json()['id']}/").json()["name"] == "deploy bot"
    assert AuditEvent.objects.get(action="apikey.created").actor == f"api:{staff.key.prefix}"


def test_a_tenant_key_makes_and_revokes_its_own_keys_and_a_revoked_key_is_refused(api, tenant):
    made = api.post("/api/v1/keys/", {"name": "ci"}, format="json").json()
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {made['key']}")
    assert other.get("/api/v1/me").status_code == 200

    revoked = api.delete(f"/api/v1/keys/{made['id']}/")

    assert revoked.status_code == 204
    refused = other.get("/api/v1/me")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert errors_of(refused) == {"Authorization": "unknown or revoked API key (or its tenant is not active)"}
    assert api.get(f"/api/v1/keys/{made['id']}/").json()["revoked_at"] is not None


def test_a_tenant_holds_at_most_the_configured_number_of_unrevoked_keys(api, tenant, settings):
    settings.CRONFLEET_MAX_API_KEYS_PER_TENANT = 2
    staff = client_for(None, tenant_header=tenant.slug)
    second = api.post("/api/v1/keys/", {"name": "second"}, format="json")

    by_the_tenant = api.post("/api/v1/keys/", {"name": "third"}, format="json")
    by_staff = staff.post(f"/api/v1/tenants/{tenant.slug}/keys/", {"name": "third"}, format="json")
    api.delete(f"/api/v1/keys/{second.json()['id']}/")
    after_a_revocation = api.post("/api/v1/keys/", {"name": "third"}, format="json")

    assert second.status_code == 201
    for refused in (by_the_tenant, by_staff):
        assert refused.status_code == 403
        assert errors_of(refused) == {
            "tenant": f"tenant {tenant.slug!r} already has the most unrevoked API keys "
            "allowed (2, CRONFLEET_MAX_API_KEYS_PER_TENANT); revoke one first"
        }
    assert after_a_revocation.status_code == 201
    assert ApiKey.objects.filter(tenant=tenant).count() == 3  # two active, one revoked


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer cf_000000000000_" + "x" * 32, "Basic YWRtaW46YWRtaW4=", "Token abc"],
    ids=["missing", "empty", "unknown", "basic", "other-scheme"],
)
def test_requests_without_a_valid_bearer_key_get_401_naming_the_header(db, authorization):
    client = APIClient()
    if authorization is not None:
        client.credentials(HTTP_AUTHORIZATION=authorization)

    response = client.get("/api/v1/jobs/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="cronfleet"'
    assert list(errors_of(response)) == ["Authorization"]


def test_a_key_in_the_query_string_is_not_a_key(api):
    response = APIClient().get(f"/api/v1/me?key={api.raw_key}&api_key={api.raw_key}")

    assert response.status_code == 401


def test_using_a_key_sets_its_last_used_time(api):
    assert ApiKey.objects.get(id=api.key.id).last_used_at is None

    api.get("/api/v1/me")

    assert ApiKey.objects.get(id=api.key.id).last_used_at is not None


def test_staff_act_for_a_tenant_only_by_naming_it_in_the_header(tenant):
    staff = client_for(None)

    missing = staff.get("/api/v1/jobs/")
    unknown = client_for(None, tenant_header="no-such-tenant").get("/api/v1/jobs/")
    acting = client_for(None, tenant_header=tenant.slug)
    created = acting.post("/api/v1/jobs/", job_body(), format="json")

    assert missing.status_code == 400 and list(errors_of(missing)) == ["X-Cronfleet-Tenant"]
    assert unknown.status_code == 400 and list(errors_of(unknown)) == ["X-Cronfleet-Tenant"]
    assert created.status_code == 201
    assert Job.objects.get(id=created.json()["id"]).tenant == tenant
    assert AuditEvent.objects.get(action="job.created").actor == f"api:{acting.key.prefix}"


def test_a_tenant_key_naming_another_tenant_in_the_header_is_refused(api, tenant):
    other = make_tenant()

    response = api.get("/api/v1/jobs/", HTTP_X_CRONFLEET_TENANT=other.slug)

    assert response.status_code == 403 and list(errors_of(response)) == ["X-Cronfleet-Tenant"]


def test_a_staff_session_administers_tenants_with_csrf_and_a_plain_user_session_is_refused(tenant):
    staff_user = User.objects.create_user("ops", password="pw", is_staff=True)
    staff_user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="scheduler_app",
            codename__in=["view_tenant", "change_tenant", "change_tenant_quotas"],
        )
    )
    session = APIClient(enforce_csrf_checks=True)
    session.force_login(staff_user)

    listed = session.get("/api/v1/tenants/")
    without_csrf = session.patch(f"/api/v1/tenants/{tenant.slug}/", {"weight": 3}, format="json")
    csrf = session.cookies["csrftoken"] = get_random_string(32)  # the token a page would have set
    with_csrf = session.patch(f"/api/v1/tenants/{tenant.slug}/", {"weight": 3}, format="json", HTTP_X_CSRFTOKEN=csrf)
    plain = APIClient()
    plain.force_login(User.objects.create_user("someone", password="pw"))

    assert listed.status_code == 200 and tenant.slug in [t["slug"] for t in listed.json()["results"]]
    assert without_csrf.status_code == 403
    assert with_csrf.status_code == 200, with_csrf.json()
    assert with_csrf.json()["weight"] == 3
    assert AuditEvent.objects.get(action="tenant.updated").actor == "api:staff:ops"
    assert session.get("/api/v1/me").json()["user"] == "ops"
    assert plain.get("/api/v1/tenants/").status_code == 401


def test_staff_change_a_tenants_quotas_and_a_quota_then_refuses_with_403(tenant):
    staff = client_for(None)
    api = client_for(tenant)
    create_job(api, name="first")

    changed = staff.patch(f"/api/v1/tenants/{tenant.slug}/", {"max_jobs": 1, "min_interval_seconds": 60}, format="json")
    over_count = api.post("/api/v1/jobs/", job_body(name="second"), format="json")
    Tenant.objects.filter(id=tenant.id).update(max_jobs=None)
    too_often = api.post("/api/v1/jobs/", job_body(name="third", schedule={"every": 10}), format="json")

    assert changed.status_code == 200 and changed.json()["max_jobs"] == 1
    assert over_count.status_code == 403 and list(errors_of(over_count)) == ["name"]
    assert too_often.status_code == 403 and list(errors_of(too_often)) == ["schedule.every"]
    assert Job.objects.filter(tenant=tenant).count() == 1


def test_a_tenant_made_inactive_by_staff_loses_api_access(tenant):
    api = client_for(tenant)

    client_for(None).patch(f"/api/v1/tenants/{tenant.slug}/", {"is_active": False}, format="json")

    assert api.get("/api/v1/jobs/").status_code == 401


def test_creating_a_tenant_with_a_bad_quota_leaves_no_tenant_behind(db):
    response = client_for(None).post("/api/v1/tenants/", {"slug": "half-made", "weight": 0}, format="json")

    assert response.status_code == 400 and list(errors_of(response)) == ["weight"]
    assert not Tenant.objects.filter(slug="half-made").exists()
