"""The OpenAPI schema is true: schemathesis, driving the live API in-process from that schema
(tests/unit/api/test_api_schema.py's SCHEMA) with valid and invalid requests, finds no server
error and no response the schema does not describe."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import override_settings
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from scheduler_app import services
from scheduler_app.models import JobRun, RunState, Tenant, db_now
from tests.integration.api.test_api import make_tenant
from tests.unit.api.test_api_schema import SCHEMA

api_schema = schemathesis.openapi.from_dict(SCHEMA)
_names = itertools.count()


@pytest.fixture
def app(db):
    """Django's WSGI application inside this test's transaction: like Django's own test
    client, it must not close the connection around each request."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield WSGIHandler()
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def callers(db):
    tenant = make_tenant()
    Tenant.objects.filter(id=tenant.id).update(api_requests_per_minute=10_000_000)
    _, tenant_key = services.apikey_create(tenant=tenant, name="schemathesis")
    _, staff_key = services.apikey_create(tenant=None, name="schemathesis staff")
    # real_object() makes a key for every example of a key route: more than a tenant's cap.
    with override_settings(CRONFLEET_MAX_API_KEYS_PER_TENANT=10_000):
        yield {"tenant": Tenant.objects.get(id=tenant.id), "tenant_key": tenant_key, "staff_key": staff_key}


def real_object(path: str, tenant: Tenant) -> str:
    """A fresh object of the kind `path` names, so valid requests reach real rows."""
    if path.startswith("/api/v1/tenants/"):
        return make_tenant().slug  # not the caller's tenant: a PATCH may deactivate it
    job = services.job_create(
        tenant,
        services.JobSpec(name=f"job-{next(_names)}", task_name="scheduler_app.echo", cron="0 * * * *", tags=["t"]),
    )
    if path.startswith("/api/v1/runs/"):
        return str(
            JobRun.objects.create(
                job=job,
                tenant=tenant,
                scheduled_at=db_now() - timedelta(hours=1),
                created_at=db_now(),
                state=RunState.DEAD,
            ).id
        )
    if path.startswith("/api/v1/keys/"):
        return str(services.apikey_create(tenant=tenant, name="victim")[0].id)
    return str(job.id)


@api_schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_answers_every_operation_as_its_schema_says(case, app, callers):
    staff = case.path.startswith("/api/v1/tenants/")
    if case.path_parameters and not case.meta.generation.mode.is_negative:
        name = next(iter(case.path_parameters))
        case.path_parameters[name] = real_object(case.path, callers["tenant"])
    if case.headers:
        # The tenant header is for staff: a tenant key naming another tenant gets 403 every time.
        case.headers.pop("X-Cronfleet-Tenant", None)
    headers = {"Authorization": f"Bearer {callers['staff_key' if staff else 'tenant_key']}"}

    case.call_and_validate(app=app, headers=headers, checks=[not_a_server_error, response_schema_conformance])
