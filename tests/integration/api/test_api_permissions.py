"""A staff session does through the API only what its Django permissions let it do in the
admin (scheduler_app/api/permissions.py, docs/roles.md); keys keep their own rules.

The walks go over every route registered under /api/v1/ (tests/support/api_walk.py's
api_routes, from the resolver): every method that writes is refused to a staff user holding
every view permission and to one holding none, and WRITES must name each of them with the
permissions that let it through, so a route added later fails here until someone says what
it needs.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.utils.crypto import get_random_string
from rest_framework.test import APIClient

from scheduler_app import alerts, schedules, services
from scheduler_app.models import Alert, ApiKey, AuditEvent, Job, JobRun, PauseRequest, RunState, Tenant, db_now
from scheduler_app.services.objectives import objective_create
from scheduler_app.services.windows import window_create
from tests.integration.api.test_api import errors_of, job_body, make_tenant
from tests.support.api_walk import API_PREFIX, allowed_methods, api_routes, fill

TAG = "nightly"
# Writes' bodies and what a staff session needs for each (a frozenset: one of them).
# Exactly these permissions let the request through with the status given.
WRITES = {
    ("tenants/", "post"): ({"slug": "made-by-session"}, ["add_tenant"], 201),
    ("tenants/{slug}/", "patch"): ({"name": "Renamed"}, ["change_tenant"], 200),
    ("tenants/{slug}/keys/", "post"): ({"name": "minted"}, ["add_apikey", "mint_apikey"], 201),
    ("tenants/{slug}/retention/", "patch"): ({"retention_days": 1}, ["change_tenant", "change_tenant_quotas"], 200),
    ("keys/", "post"): ({"name": "minted"}, ["add_apikey", "mint_apikey"], 201),
    ("keys/{id}/", "delete"): (None, ["change_apikey"], 204),
    ("jobs/", "post"): (job_body(name="made-by-session"), ["add_job"], 201),
    ("jobs/{id}/", "patch"): ({"description": "changed"}, ["change_job"], 200),
    ("jobs/{id}/", "delete"): (None, ["delete_job"], 204),
    ("jobs/{id}/pause/", "post"): ({"note": "by a session"}, ["change_job"], 200),
    ("jobs/{id}/resume/", "post"): (None, ["change_job"], 200),
    ("jobs/{id}/trigger/", "post"): (None, ["change_job"], 201),
    ("jobs/{id}/backfill/", "post"): (
        {"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T03:00:00Z", "dry_run": False},
        ["change_job"],
        200,
    ),
    ("jobs/bulk/", "post"): ({"tag": TAG, "action": "pause"}, ["change_job"], 200),
    ("runs/{id}/replay/", "post"): (None, ["change_job"], 200),
    ("jobs/{id}/retention/", "patch"): ({"retention_days": 1}, ["change_job"], 200),
    ("jobs/{id}/alerts/", "put"): ({"on_failure": True}, ["change_alertrule"], 200),  # the job has a rule
    ("jobs/{id}/alerts/", "patch"): ({"on_failure": False}, ["change_alertrule"], 200),
    ("jobs/{id}/alerts/", "delete"): (None, ["delete_alertrule"], 204),
    ("calendars/", "post"): ({"name": "made-by-session"}, ["add_calendar"], 201),
    ("calendars/{id}/", "patch"): ({"weekdays": [0, 1, 2]}, ["change_calendar"], 200),
    ("calendars/{id}/", "delete"): (None, ["delete_calendar"], 204),
    ("windows/", "post"): (
        {"name": "made-by-session", "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-01T01:00:00Z"},
        ["add_maintenancewindow"],
        201,
    ),
    ("windows/{id}/", "patch"): ({"action": "defer"}, ["change_maintenancewindow"], 200),
    ("windows/{id}/", "delete"): (None, ["delete_maintenancewindow"], 204),
    ("objectives/", "post"): ({"name": "made-by-session", "kind": "success", "target": "99%"}, ["add_objective"], 201),
    ("objectives/{id}/", "delete"): (None, ["delete_objective"], 204),
    ("pauses/", "post"): ({"tag": TAG, "note": "by a session"}, ["change_job"], 200),
    # The fixture's request is another person's, of no job: approving it pauses nothing.
    ("pause-requests/{id}/approve/", "post"): (
        {"fingerprint": schedules.set_fingerprint("selection", [])},
        ["approve_pauserequest", "change_job"],
        200,
    ),
    ("pause-requests/{id}/refuse/", "post"): (None, ["change_job"], 200),
}
# POSTs that save nothing: reads, needing view_job.
READ_POSTS = {
    ("jobs/{id}/impact/", "post"): {"description": "what if"},
    ("preview/", "post"): {"schedule": {"every": 60}},
}
WRITE_METHODS = ("post", "put", "patch", "delete")


@pytest.fixture
def alpha(db) -> dict:
    """Tenant alpha, which sessions act for, with a job (and its rule, a failed run, an alert
    and a key), and tenant beta, which has nothing."""
    tenant = make_tenant(retention_days=2)
    job = services.job_create(
        tenant, services.JobSpec(name="report", task_name="scheduler_app.echo", cron="0 * * * *", tags=[TAG])
    )
    run = JobRun.objects.create(
        job=job,
        tenant=tenant,
        scheduled_at=db_now() - timedelta(minutes=5),
        created_at=db_now(),
        state=RunState.FAILED,
        error="boom",
    )
    rule = alerts.rule_set(job, {"on_failure": True, "emails": ["ops@example.com"]})
    Alert.objects.create(
        rule=rule,
        job=job,
        tenant=tenant,
        kind="failed",
        dedup_key="failed-1",
        message="report failed",
        raised_at=db_now(),
        next_delivery_at=db_now(),
    )
    key, _ = services.apikey_create(tenant=tenant, name="deploy")
    calendar = services.calendar_create(tenant, name="uk-bank", country="GB")
    window = window_create(tenant, name="freeze", starts_at="2030-01-01T00:00:00Z", ends_at="2030-01-01T01:00:00Z")
    objective = objective_create(tenant, name="fires", kind="start", threshold_seconds=60, target="99%")
    return {
        "tenant": tenant,
        "job": job,
        "run": run,
        "key": key,
        "beta": make_tenant(),
        "calendar": calendar,
        "window": window,
        "objective": objective,
        "pause_request": PauseRequest.objects.create(
            tenant=tenant,
            scope="selection",
            job_ids=[],
            fingerprint=schedules.set_fingerprint("selection", []),
            requested_by="api:someone-else",
            requested_at=db_now(),
        ),
    }


def staff_user(*codenames: str, superuser: bool = False) -> User:
    user = User.objects.create_user(
        f"staff-{get_random_string(8).lower()}", password="pw", is_staff=True, is_superuser=superuser
    )
    user.user_permissions.add(*permissions(*codenames))
    return user


def permissions(*codenames: str) -> list[Permission]:
    found = list(Permission.objects.filter(content_type__app_label="scheduler_app", codename__in=codenames))
    assert len(found) == len(set(codenames)), f"unknown permission among {codenames}"
    return found


def viewer() -> User:
    """A staff user holding every view permission of Cronfleet's models, and nothing else."""
    user = staff_user()
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="scheduler_app", codename__startswith="view_")
    )
    return user


def session_for(user: User, tenant: Tenant) -> APIClient:
    """The admin's session cookie, its CSRF token and the tenant header, as a browser would send them."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    csrf = client.cookies["csrftoken"] = get_random_string(32)
    client.credentials(HTTP_X_CSRFTOKEN=csrf, HTTP_X_CRONFLEET_TENANT=tenant.slug)
    return client


def send(client, method: str, path: str, body):
    if method in ("get", "head", "options"):
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


def api_calls(a: dict):
    """(template, method, path) of every route and method the API answers."""
    for template, callback in api_routes():
        for method in sorted(allowed_methods(callback)):
            yield template, method, f"/{API_PREFIX}{fill(template, a)}"


def state_of(a: dict) -> list:
    return [list(model.objects.order_by("pk").values()) for model in (Tenant, Job, JobRun, ApiKey, AuditEvent)]


def test_writes_names_every_write_route_of_the_api(alpha):
    walked = {(template, method) for template, method, _ in api_calls(alpha) if method in WRITE_METHODS}

    assert walked == set(WRITES) | set(READ_POSTS)  # a new write route: add it to WRITES with what it needs


@pytest.mark.parametrize("who", ["viewer", "nobody"])
def test_a_staff_session_without_the_permission_gets_403_on_every_write_route(alpha, who):
    user = viewer() if who == "viewer" else staff_user()
    session = session_for(user, alpha["tenant"])
    before = state_of(alpha)
    refused = []

    for template, method, path in api_calls(alpha):
        if method not in WRITE_METHODS or (who == "viewer" and (template, method) in READ_POSTS):
            continue
        body = WRITES.get((template, method), (READ_POSTS.get((template, method)),))[0]
        response = send(session, method, path, body)
        what = f"{method.upper()} {path} as {who}: {response.status_code} {response.content[:300]!r}"
        assert response.status_code == 403, what
        ((field, message),) = errors_of(response).items()
        assert field == "permission" and f"staff user {user.username!r} lacks the permission " in message, what
        refused.append((template, method))

    assert state_of(alpha) == before
    assert len(refused) >= len(WRITES)


def test_a_staff_session_without_any_permission_reads_nothing_but_who_it_is(alpha):
    session = session_for(staff_user(), alpha["tenant"])

    for template, method, path in api_calls(alpha):
        if method in WRITE_METHODS:
            continue
        response = send(session, method, path, None)
        what = f"{method.upper()} {path}: {response.status_code} {response.content[:300]!r}"
        who_am_i = template in ("me", "me/")  # /me answers with and without the slash
        assert response.status_code == (200 if who_am_i else 403), what
        if method == "get" and not who_am_i:
            assert "report" not in response.content.decode() and "boom" not in response.content.decode(), what


def test_a_viewer_session_reads_every_route(alpha):
    session = session_for(viewer(), alpha["tenant"])

    for template, method, path in api_calls(alpha):
        if method in WRITE_METHODS and (template, method) not in READ_POSTS:
            continue
        response = send(session, method, path, READ_POSTS.get((template, method)))
        assert response.status_code == 200, (
            f"{method.upper()} {path}: {response.status_code} {response.content[:300]!r}"
        )


@pytest.mark.parametrize(("template", "method"), list(WRITES))
def test_a_staff_session_holding_the_route_s_permissions_gets_through(alpha, template, method):
    body, needed, expected = WRITES[(template, method)]
    session = session_for(staff_user(*needed), alpha["tenant"])

    response = send(session, method, f"/{API_PREFIX}{fill(template, alpha)}", body)

    assert response.status_code == expected, response.content[:500]


@pytest.mark.parametrize(
    ("template", "method"), [(t, m) for (t, m), (_, needed, _) in WRITES.items() if len(needed) > 1]
)
def test_each_of_a_route_s_permissions_is_needed(alpha, template, method):
    body, needed, _ = WRITES[(template, method)]

    for lacking in needed:
        user = staff_user(*(name for name in needed if name != lacking))
        response = send(session_for(user, alpha["tenant"]), method, f"/{API_PREFIX}{fill(template, alpha)}", body)
        assert response.status_code == 403, response.content[:500]
        assert errors_of(response)["permission"].endswith(f"lacks the permission scheduler_app.{lacking}")


@pytest.mark.parametrize(("template", "method"), list(WRITES))
def test_a_superuser_session_gets_through_every_write_route(alpha, template, method):
    body, _, expected = WRITES[(template, method)]
    session = session_for(staff_user(superuser=True), alpha["tenant"])

    response = send(session, method, f"/{API_PREFIX}{fill(template, alpha)}", body)

    assert response.status_code == expected, response.content[:500]


def test_minting_a_key_for_another_tenant_needs_mint_apikey(alpha):
    beta = alpha["beta"]
    path = f"/api/v1/tenants/{beta.slug}/keys/"
    lacking = staff_user("view_tenant", "add_apikey", "view_apikey")
    without = session_for(lacking, alpha["tenant"])
    holder = session_for(staff_user("add_apikey", "mint_apikey"), alpha["tenant"])

    refused = without.post(path, {"name": "stolen"}, format="json")
    made = holder.post(path, {"name": "deploy"}, format="json")

    assert refused.status_code == 403
    assert errors_of(refused) == {
        "permission": f"staff user {lacking.username!r} lacks the permission scheduler_app.mint_apikey"
    }
    assert made.status_code == 201, made.json()
    assert list(ApiKey.objects.filter(tenant=beta).values_list("name", flat=True)) == ["deploy"]
    minted = APIClient()
    minted.credentials(HTTP_AUTHORIZATION=f"Bearer {made.json()['key']}")
    assert minted.get("/api/v1/me").json()["tenant"]["slug"] == beta.slug


def test_quotas_and_weight_need_change_tenant_quotas_beside_change_tenant(alpha):
    tenant = alpha["tenant"]
    session = session_for(staff_user("change_tenant", "add_tenant"), tenant)
    path = f"/api/v1/tenants/{tenant.slug}/"

    renamed = session.patch(path, {"name": "Alpha"}, format="json")
    quota = session.patch(path, {"max_jobs": 1000}, format="json")
    weight = session.patch(path, {"name": "Alpha 2", "weight": 50}, format="json")
    made = session.post("/api/v1/tenants/", {"slug": "gamma", "max_fires_per_minute": 10**6}, format="json")

    assert renamed.status_code == 200, renamed.json()
    for refused in (quota, weight, made):
        assert refused.status_code == 403
        assert errors_of(refused)["permission"].endswith("lacks the permission scheduler_app.change_tenant_quotas")
    tenant.refresh_from_db()
    assert (tenant.name, tenant.max_jobs, tenant.weight) == ("Alpha", None, 1)
    assert not Tenant.objects.filter(slug="gamma").exists()


def test_quotas_change_with_change_tenant_quotas(alpha):
    tenant = alpha["tenant"]
    session = session_for(staff_user("change_tenant", "change_tenant_quotas"), tenant)

    response = session.patch(f"/api/v1/tenants/{tenant.slug}/", {"max_jobs": 5, "weight": 3}, format="json")

    assert response.status_code == 200, response.json()
    assert (response.json()["max_jobs"], response.json()["weight"]) == (5, 3)


def test_a_bulk_action_needs_what_the_admin_asks_for_the_same_on_one_job(alpha):
    operator = session_for(staff_user("change_job"), alpha["tenant"])
    deleter = session_for(staff_user("delete_job"), alpha["tenant"])

    delete_refused = operator.post("/api/v1/jobs/bulk/", {"tag": TAG, "action": "delete"}, format="json")
    pause_refused = deleter.post("/api/v1/jobs/bulk/", {"tag": TAG, "action": "pause"}, format="json")
    deleted = deleter.post("/api/v1/jobs/bulk/", {"tag": TAG, "action": "delete"}, format="json")

    assert errors_of(delete_refused)["permission"].endswith("lacks the permission scheduler_app.delete_job")
    assert errors_of(pause_refused)["permission"].endswith("lacks the permission scheduler_app.change_job")
    assert (delete_refused.status_code, pause_refused.status_code, deleted.status_code) == (403, 403, 200)
    assert deleted.json()["count"] == 1 and not Job.objects.filter(id=alpha["job"].id).exists()


def test_making_an_alert_rule_needs_add_and_changing_one_needs_change(alpha):
    other = services.job_create(
        alpha["tenant"], services.JobSpec(name="bare", task_name="scheduler_app.echo", every=60)
    )
    adder = session_for(staff_user("add_alertrule"), alpha["tenant"])

    made = adder.put(f"/api/v1/jobs/{other.id}/alerts/", {"on_failure": True}, format="json")
    changed = adder.patch(f"/api/v1/jobs/{other.id}/alerts/", {"on_failure": False}, format="json")

    assert made.status_code == 201, made.json()
    assert changed.status_code == 403
    assert errors_of(changed)["permission"].endswith("lacks the permission scheduler_app.change_alertrule")


def test_stats_of_every_tenant_need_view_jobrun(alpha):
    assert (
        session_for(staff_user("view_job"), alpha["tenant"]).get("/api/v1/stats/?all_tenants=true").status_code == 403
    )
    assert (
        session_for(staff_user("view_jobrun"), alpha["tenant"]).get("/api/v1/stats/?all_tenants=true").status_code
        == 200
    )


def test_keys_keep_their_rules_a_staff_key_does_everything_a_tenant_key_its_own_tenant(alpha):
    _, staff_raw = services.apikey_create(tenant=None, name="ops")
    _, tenant_raw = services.apikey_create(tenant=alpha["tenant"], name="bot")
    staff, own = APIClient(), APIClient()
    staff.credentials(HTTP_AUTHORIZATION=f"Bearer {staff_raw}")
    own.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_raw}")

    assert staff.post(f"/api/v1/tenants/{alpha['beta'].slug}/keys/", {"name": "k"}, format="json").status_code == 201
    assert staff.patch(f"/api/v1/tenants/{alpha['beta'].slug}/", {"max_jobs": 3}, format="json").status_code == 200
    assert own.post(f"/api/v1/jobs/{alpha['job'].id}/pause/", {}, format="json").status_code == 200
    assert own.post("/api/v1/keys/", {"name": "another"}, format="json").status_code == 201
    assert own.post(f"/api/v1/tenants/{alpha['beta'].slug}/keys/", {"name": "k"}, format="json").status_code == 403


def test_a_session_s_unknown_method_is_still_a_405(alpha):
    session = session_for(staff_user(), alpha["tenant"])

    assert session.put("/api/v1/jobs/", {}, format="json").status_code == 405
    assert session.options("/api/v1/jobs/").status_code == 405
