"""Tenant isolation: tenant B never reads or changes tenant A's objects.

The walk (tests/support/api_walk.py) goes over every URL pattern registered under /api/v1/ (from
the resolver, so a route added later is walked without anyone remembering to), fills each path
parameter with A's object and calls it with every HTTP method as B. A parameter the walk cannot
fill fails the test, naming the route: teach PARAMETERS about it.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from scheduler_app import alerts, schedules, services
from scheduler_app.models import (
    Alert,
    AlertRule,
    ApiKey,
    AuditEvent,
    Calendar,
    Job,
    JobRun,
    MaintenanceWindow,
    PauseRequest,
    RunState,
    Tenant,
    db_now,
)
from scheduler_app.services.objectives import objective_create
from scheduler_app.services.windows import window_create
from tests.integration.api.test_api import client_for, errors_of, make_tenant
from tests.support.api_walk import API_PREFIX, METHODS, allowed_methods, api_routes, fill

MARKER = "a-secret"  # in A's slug, names, description and error texts: must never reach B
TAG = "shared-tag"  # a tag of A's that B uses too (B may guess a tag; bulk must stay in B's jobs)

# Routes only staff may call (tenant keys get 403 on any method).
STAFF_ROUTES = ("tenants",)
# Bodies that would do harm if scoping failed (anything else gets BODY).
BODY = {"name": "stolen", "note": "stolen"}
BODIES = {
    ("jobs/bulk/", "post"): {"tag": TAG, "action": "delete"},
    ("jobs/{id}/backfill/", "post"): {"start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z", "dry_run": False},
    ("tenants/{slug}/", "patch"): {"is_active": False},
    ("keys/", "post"): {"name": "b's own key"},
    ("pauses/", "post"): {"tag": TAG, "note": "stolen"},
    ("jobs/{id}/alerts/", "put"): {"enabled": False, "webhook_url": "https://b.example.com/stolen"},
    ("jobs/{id}/alerts/", "patch"): {"emails": ["b@example.com"]},
}


@pytest.fixture
def tenant_a(db) -> dict:
    """Tenant A with one of everything, each carrying MARKER where there is text."""
    tenant = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(slug=f"{MARKER}-{tenant.slug}", name=f"{MARKER} tenant")
    tenant.refresh_from_db()
    job = services.job_create(
        tenant,
        services.JobSpec(
            name=f"{MARKER}-job",
            task_name="scheduler_app.echo",
            cron="0 * * * *",
            tags=[TAG],
            description=f"{MARKER} description",
            kwargs={"marker": MARKER},
        ),
    )
    run = JobRun.objects.create(
        job=job,
        tenant=tenant,
        scheduled_at=db_now() - timedelta(minutes=5),
        created_at=db_now(),
        state=RunState.DEAD,
        error=f"{MARKER} error",
    )
    AuditEvent.objects.create(
        tenant=tenant, job=job, job_name=job.name, run_id=run.id, action="run.dead", actor=f"worker:{MARKER}"
    )
    key, _ = services.apikey_create(tenant=tenant, name=f"{MARKER} key")
    rule = alerts.rule_set(job, {"on_failure": True, "emails": [f"{MARKER}@example.com"]})
    alert = Alert.objects.create(
        rule=rule,
        job=job,
        tenant=tenant,
        kind="failed",
        dedup_key=f"{MARKER}-alert",
        message=f"{MARKER} alert",
        raised_at=db_now(),
        next_delivery_at=db_now(),
    )
    calendar = services.calendar_create(
        tenant,
        name=f"{MARKER}-calendar",
        description=f"{MARKER} calendar",
        extra_holidays={"2030-01-02": f"{MARKER} day"},
    )
    window = window_create(
        tenant,
        name=f"{MARKER}-window",
        description=f"{MARKER} window",
        starts_at="2030-01-01T00:00:00Z",
        ends_at="2030-01-01T01:00:00Z",
    )
    objective = objective_create(tenant, name=f"{MARKER}-objective", kind="success", target="99%", tag=f"{MARKER}-tag")
    pause_request = PauseRequest.objects.create(
        tenant=tenant,
        scope="tenant",
        job_ids=[job.id],
        fingerprint=schedules.set_fingerprint("tenant", [job.id]),
        note=f"{MARKER} pause",
        requested_by=f"api:{MARKER}",
        requested_at=db_now(),
    )
    return {
        "tenant": tenant,
        "job": job,
        "run": run,
        "key": key,
        "alert": alert,
        "calendar": calendar,
        "window": window,
        "objective": objective,
        "pause_request": pause_request,
    }


def state_of(a: dict) -> list:
    """Everything of A's that a leak through a write would change."""
    return [
        list(Tenant.objects.filter(id=a["tenant"].id).values()),
        list(Job.objects.filter(tenant=a["tenant"]).values()),
        list(JobRun.objects.filter(tenant=a["tenant"]).values()),
        list(ApiKey.objects.filter(tenant=a["tenant"]).values()),
        list(AlertRule.objects.filter(job__tenant=a["tenant"]).values()),
        list(Alert.objects.filter(tenant=a["tenant"]).values()),
        list(Calendar.objects.filter(tenant=a["tenant"]).values()),
        list(MaintenanceWindow.objects.filter(tenant=a["tenant"]).values()),
        list(PauseRequest.objects.filter(tenant=a["tenant"]).values()),
    ]


def call(client, method: str, path: str, body: dict | None):
    if method in ("get", "head", "options"):
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


@pytest.mark.parametrize("caller", ["tenant_key", "staff_key_acting_for_b"])
def test_the_walk_every_api_route_and_method_as_tenant_b_never_reaches_tenant_as_objects(tenant_a, caller):
    tenant_b = make_tenant()
    b = client_for(tenant_b) if caller == "tenant_key" else client_for(None, tenant_header=tenant_b.slug)
    before = state_of(tenant_a)
    own_ids = {
        "jobs": {tenant_a["job"].id},
        "runs": {tenant_a["run"].id},
        "keys": {tenant_a["key"].id},
        "alerts": {tenant_a["alert"].id},
        "calendars": {tenant_a["calendar"].id},
    }
    walked = set()

    for template, callback in api_routes():
        segment = template.split("/")[0]
        if segment in STAFF_ROUTES and caller != "tenant_key":
            continue  # staff administer every tenant by design
        path = f"/{API_PREFIX}{fill(template, tenant_a)}"
        allowed = allowed_methods(callback)
        for method in METHODS:
            response = call(b, method, path, BODIES.get((template, method), BODY))
            walked.add((template, method))
            what = f"{method.upper()} {path} as {caller}: {response.status_code} {response.content[:300]!r}"
            assert MARKER.encode() not in response.content, what
            if segment in STAFF_ROUTES:
                assert response.status_code == 403, what
            elif method not in allowed:
                assert response.status_code == 405, what
            elif "{" in template:
                assert response.status_code == 404, what
                assert method == "head" or errors_of(response) == {"id": "not found"}, what
            elif method == "get" and response.status_code == 200 and segment in own_ids:
                listed = {row["id"] for row in response.json()["results"]}
                assert not listed & own_ids[segment], what

    assert state_of(tenant_a) == before
    walked_templates = {template for template, _ in walked}
    assert {
        "me",
        "jobs/",
        "jobs/{id}/",
        "jobs/{id}/pause/",
        "runs/{id}/replay/",
        "keys/{id}/",
        "stats/",
        "preview/",
        "jobs/{id}/alerts/",
        "alerts/",
    } <= walked_templates  # the walk found the routes (and so every other one)


def test_bs_stats_do_not_count_as_runs(tenant_a):
    body = client_for(make_tenant()).get("/api/v1/stats/?window=86400").json()

    assert body["total"] == 0


def test_a_filter_on_another_tenants_job_is_refused_naming_the_field(tenant_a):
    b = client_for(make_tenant())

    response = b.get(f"/api/v1/runs/?job={tenant_a['job'].id}")

    assert response.status_code == 400
    assert errors_of(response) == {"job": "not found"}


def test_a_bulk_action_with_another_tenants_tag_changes_only_the_callers_jobs(tenant_a):
    b = client_for(make_tenant())

    response = b.post("/api/v1/jobs/bulk/", {"tag": TAG, "action": "pause"}, format="json")

    assert response.json()["count"] == 0
    assert Job.objects.get(id=tenant_a["job"].id).enabled


def test_a_filter_on_another_tenants_job_is_refused_in_the_alerts_list_too(tenant_a):
    b = client_for(make_tenant())

    response = b.get(f"/api/v1/alerts/?job={tenant_a['job'].id}")

    assert response.status_code == 400
    assert errors_of(response) == {"job": "not found"}


def test_tenant_keys_get_403_on_every_staff_route(tenant_a):
    b = client_for(make_tenant())

    responses = [
        b.get("/api/v1/tenants/"),
        b.post("/api/v1/tenants/", {"slug": "new"}, format="json"),
        b.get(f"/api/v1/tenants/{tenant_a['tenant'].slug}/"),
        b.post(f"/api/v1/tenants/{tenant_a['tenant'].slug}/keys/", {"name": "k"}, format="json"),
    ]

    assert [response.status_code for response in responses] == [403] * 4
    assert errors_of(responses[0]) == {"Authorization": "needs a staff key or a staff session"}
    assert not Tenant.objects.filter(slug="new").exists()


def test_a_key_of_tenant_a_acts_only_inside_tenant_a(tenant_a):
    a = client_for(tenant_a["tenant"])

    jobs = a.get("/api/v1/jobs/").json()["results"]
    runs = a.get("/api/v1/runs/").json()["results"]
    raised = a.get("/api/v1/alerts/").json()["results"]
    rule = a.get(f"/api/v1/jobs/{tenant_a['job'].id}/alerts/").json()

    assert [job["id"] for job in jobs] == [tenant_a["job"].id]
    assert [run["id"] for run in runs] == [tenant_a["run"].id]
    assert [alert["id"] for alert in raised] == [tenant_a["alert"].id]
    assert rule["emails"] == [f"{MARKER}@example.com"]
    assert json.dumps(jobs).count(MARKER) >= 1  # the marker is visible to its own tenant
