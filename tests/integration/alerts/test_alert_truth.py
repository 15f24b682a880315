"""Alerts tell the truth (issue 41, item 3): a rule without a webhook or e-mail records its
alerts as sent nowhere, never as delivered; each alert says where it went; its message leads
with the reason, which no list cuts. Against the real PostgreSQL: the admin through Django's
test client, `alerts list` through call_command, the API through DRF's client."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import alerts, services
from scheduler_app.models import Alert, Job, RunState, Tenant, db_now
from tests.integration.api.test_api import client_for
from tests.support.admin import url
from tests.support.alerts import arm, run_of
from tests.support.cli import run

TASK = "scheduler_app.echo"
REASON = "failed on attempt 1: checkin: failed with exit status 1 (the backup disk is full)"


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme")


@pytest.fixture
def job(tenant) -> Job:
    name = "nightly-warehouse-backup-of-the-eu-customers-database"
    return services.job_create(tenant, services.JobSpec(name=name, task_name=TASK, cron="0 3 * * *"))


def raise_failed(job: Job, **rule) -> Alert:
    now = db_now()
    arm(job, now, on_failure=True, **rule)
    run_of(
        job,
        now - timedelta(minutes=5),
        RunState.FAILED,
        error="checkin: failed with exit status 1 (the backup disk is full)",
    )
    assert alerts.evaluate_due_rules(now) == 1
    alerts.deliver_pending(now)
    return Alert.objects.get()


def test_an_alert_of_a_rule_without_a_channel_is_no_channel_not_delivered(job, admin_client, tenant):
    alert = raise_failed(job)

    assert alert.delivered_at is None and alert.next_delivery_at is None
    assert alerts.delivery_status(alert) == "no_channel"
    assert alerts.deliver_pending(db_now() + timedelta(hours=1)) == 0  # nothing to retry
    listing = admin_client.get(url("alert", "changelist")).content.decode()
    page = admin_client.get(url("job", "change", job.pk)).content.decode()
    table = run("alerts", "list")
    for shown in (listing, page, table):
        assert "no channel" in shown and "delivered" not in shown.split("no channel")[1][:40]
    assert "not sent: no channel" in table.splitlines()[2]
    assert " delivered " not in table.splitlines()[2]


def test_the_api_says_no_channel(job, tenant):
    raise_failed(job)

    body = client_for(tenant).get("/api/v1/alerts/").json()

    delivery = body["results"][0]["delivery"]
    assert delivery["status"] == "no_channel" and delivery["delivered_at"] is None
    assert delivery["sent_to"] == "no channel"


def test_a_delivered_alert_says_where_it_went(job, settings, admin_client):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alert = raise_failed(job, emails=["ops@example.com", "oncall@example.com"])

    assert alert.delivered_at is not None
    assert alerts.where_sent(alert) == "2 e-mails"
    assert "delivered to 2 e-mails" in run("alerts", "list")
    assert "to 2 e-mails" in admin_client.get(url("alert", "changelist")).content.decode()


def test_the_message_leads_with_the_reason_and_no_list_cuts_it(job, admin_client):
    alert = raise_failed(job)

    assert alert.message.startswith(REASON + " — run ")
    assert alert.message.endswith(f"of {job}")
    row = run("alerts", "list").splitlines()[2]
    listing = admin_client.get(url("alert", "changelist")).content.decode()
    page = admin_client.get(url("job", "change", job.pk)).content.decode()
    assert REASON in row
    assert f'<span class="cf-reason">{REASON}</span>' in listing
    assert f'<span class="cf-reason">{REASON}</span>' in page
