"""A job keeps its runs no longer than its tenant does: the tenant's retention (its own, else
the settings') is the operator's bound on the job's days, failed days and keep-last, through
the API, the admin and the CLI alike (services.check_job_retention); 0 (forever) is refused
while the tenant has a bound. Lowering the tenant's retention brings its jobs' longer values
down with it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, Tenant
from tests.integration.api.test_api import client_for, errors_of, make_tenant
from tests.support.admin import change_form


@pytest.fixture(autouse=True)
def policy(settings):
    settings.CRONFLEET_RETENTION_DAYS = 30
    settings.CRONFLEET_RETENTION_FAILED_DAYS = 90
    settings.CRONFLEET_RETENTION_KEEP_LAST = 0


def job_of(tenant: Tenant) -> Job:
    return services.job_create(
        tenant, services.JobSpec(name="nightly", task_name="scheduler_app.echo", cron="0 9 * * *")
    )


@pytest.fixture
def bounded(db) -> Job:
    """A job of a tenant whose staff set 1 day (failed runs 3, each job's newest 5)."""
    tenant = make_tenant()
    services.tenant_set_retention(
        tenant, {"retention_days": 1, "retention_failed_days": 3, "retention_keep_last": 5}, actor="staff"
    )
    return job_of(tenant)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"retention_days": 0}, "retention_days"),  # forever
        ({"retention_days": 2}, "retention_days"),
        ({"retention_failed_days": 0}, "retention_failed_days"),
        ({"retention_failed_days": 4}, "retention_failed_days"),
        ({"retention_keep_last": 6}, "retention_keep_last"),
    ],
)
def test_a_tenant_key_cannot_keep_its_job_s_runs_longer_than_its_tenant(bounded, body, field):
    response = client_for(bounded.tenant).patch(f"/api/v1/jobs/{bounded.id}/retention/", body, format="json")

    assert response.status_code == 400, response.content
    assert list(errors_of(response)) == [field]
    assert f"tenant {bounded.tenant.slug!r}'s retention" in errors_of(response)[field]
    assert Job.objects.filter(
        id=bounded.id, retention_days=None, retention_failed_days=None, retention_keep_last=None
    ).exists()


def test_the_message_says_forever_is_refused(bounded):
    response = client_for(bounded.tenant).patch(
        f"/api/v1/jobs/{bounded.id}/retention/", {"retention_days": 0}, format="json"
    )

    assert "between 1 and 1 days" in errors_of(response)["retention_days"]
    assert "0 (forever) is refused" in errors_of(response)["retention_days"]


def test_a_job_may_keep_its_runs_for_less_or_as_long_as_its_tenant(bounded):
    client = client_for(bounded.tenant)

    same = client.patch(
        f"/api/v1/jobs/{bounded.id}/retention/",
        {"retention_days": 1, "retention_failed_days": 2, "retention_keep_last": 5},
        format="json",
    )
    inherit = client.patch(f"/api/v1/jobs/{bounded.id}/retention/", {"retention_keep_last": None}, format="json")

    assert same.status_code == 200, same.content
    assert inherit.status_code == 200, inherit.content
    assert inherit.json()["effective"] == {
        "days": 1,
        "failed_days": 2,
        "keep_last": 5,
        "sources": {"days": "job", "failed_days": "job", "keep_last": "tenant"},
    }


def test_a_staff_key_is_held_to_the_tenant_s_bound_too(bounded):
    staff = client_for(None, tenant_header=bounded.tenant.slug)

    response = staff.patch(f"/api/v1/jobs/{bounded.id}/retention/", {"retention_days": 0}, format="json")

    assert response.status_code == 400
    assert list(errors_of(response)) == ["retention_days"]


def test_the_settings_bound_a_tenant_that_sets_nothing(db):
    job = job_of(make_tenant())
    client = client_for(job.tenant)

    over = client.patch(f"/api/v1/jobs/{job.id}/retention/", {"retention_days": 31}, format="json")
    keep = client.patch(f"/api/v1/jobs/{job.id}/retention/", {"retention_keep_last": 1}, format="json")
    at = client.patch(
        f"/api/v1/jobs/{job.id}/retention/", {"retention_days": 30, "retention_failed_days": 90}, format="json"
    )

    assert over.status_code == 400 and "CRONFLEET_RETENTION_DAYS" in errors_of(over)["retention_days"]
    assert keep.status_code == 400 and "CRONFLEET_RETENTION_KEEP_LAST" in errors_of(keep)["retention_keep_last"]
    assert at.status_code == 200, at.content


def test_a_tenant_kept_forever_bounds_nothing(db):
    job = job_of(make_tenant(retention_days=0))

    response = client_for(job.tenant).patch(f"/api/v1/jobs/{job.id}/retention/", {"retention_days": 0}, format="json")

    assert response.status_code == 200, response.content


def test_the_cli_refuses_a_job_retention_over_the_tenant_s_naming_the_field(bounded):
    with pytest.raises(CommandError, match="retention set: retention_days: must be between 1 and 1 days"):
        call_command("retention", "set", "--job", str(bounded.id), "--days", "0")

    assert Job.objects.get(id=bounded.id).retention_days is None


def test_the_admin_job_page_refuses_a_job_retention_over_the_tenant_s_on_its_field(bounded, admin_client):
    response = admin_client.post(
        reverse("admin:scheduler_app_job_change", args=[bounded.pk]),
        change_form(bounded, retention_days="0", retention_failed_days="", retention_keep_last=""),
    )

    assert response.status_code == 200
    assert "0 (forever) is refused" in str(response.context["adminform"].form.errors["retention_days"])
    assert Job.objects.get(id=bounded.id).retention_days is None


def test_lowering_a_tenant_s_retention_brings_its_jobs_down_with_it(db):
    tenant = make_tenant(retention_days=60, retention_failed_days=120, retention_keep_last=50)
    longer = job_of(tenant)
    services.job_set_retention(longer, {"retention_days": 40, "retention_failed_days": 100, "retention_keep_last": 20})
    shorter = services.job_create(tenant, services.JobSpec(name="short", task_name="scheduler_app.echo", every=60))
    services.job_set_retention(shorter, {"retention_days": 2})

    services.tenant_set_retention(
        tenant, {"retention_days": 7, "retention_failed_days": 14, "retention_keep_last": 3}, actor="staff"
    )

    longer.refresh_from_db()
    shorter.refresh_from_db()
    assert (longer.retention_days, longer.retention_failed_days, longer.retention_keep_last) == (7, 14, 3)
    assert shorter.retention_days == 2
    event = AuditEvent.objects.filter(job=longer, action="job.updated", actor="staff").get()
    assert event.detail == {
        "changes": {"retention_days": [40, 7], "retention_failed_days": [100, 14], "retention_keep_last": [20, 3]},
        "reason": "the tenant's retention was lowered",
    }


def test_retention_clamp_lowers_values_saved_before_the_bound_existed(bounded):
    # As a ledger from before the bound: a job keeping its runs forever, and 50 of them.
    Job.objects.filter(id=bounded.id).update(retention_days=0, retention_failed_days=0, retention_keep_last=50)
    others = job_of(make_tenant())  # a tenant without a bound of its own: the settings' 30/90/0
    Job.objects.filter(id=others.id).update(retention_days=7)  # within the settings: left alone

    out = StringIO()
    call_command("retention", "clamp", stdout=out)

    bounded.refresh_from_db()
    others.refresh_from_db()
    assert (bounded.retention_days, bounded.retention_failed_days, bounded.retention_keep_last) == (1, 3, 5)
    assert others.retention_days == 7
    assert out.getvalue().strip() == "1 job(s) lowered to their tenant's retention bound"
    assert AuditEvent.objects.filter(job_id=bounded.id, actor="cli").exists()
