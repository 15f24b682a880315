"""What the demo seeds beyond its jobs: an alert rule on demo/flaky with no channel, so the
demo's dashboard and alert list show alerts; and where / of the deployment leads."""

from __future__ import annotations

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.urls import reverse

from scheduler_app import alerts
from scheduler_app.management.commands.demo import Command as DemoCommand
from scheduler_app.models import Alert, AlertRule, AuditEvent, JobRun, RunState, db_now


def seed() -> str:
    out = StringIO()
    command = DemoCommand(stdout=out)
    command.output_lock = threading.Lock()  # set by handle(), which this test does not call
    command.seed()
    return out.getvalue()


def test_the_demo_seeds_an_alert_rule_on_flaky_with_no_channel_once(db, admin_client):
    said = seed()
    seed()  # a second start keeps the rule

    rule = AlertRule.objects.select_related("job__tenant").get()
    assert (str(rule.job), rule.on_failure, rule.webhook_url, rule.emails) == ("demo/flaky", True, "", [])
    assert AuditEvent.objects.filter(action="job.alerts_set").count() == 1
    assert "alert rule on demo/flaky" in said
    listing = admin_client.get(reverse("admin:scheduler_app_alertrule_changelist")).content.decode()
    assert "no channel" in listing


def test_the_demo_keeps_a_rule_someone_changed(db):
    seed()
    rule = AlertRule.objects.get()
    alerts.rule_set(rule.job, {"on_failure": False, "no_success_seconds": 3600}, actor="ops")

    seed()

    rule.refresh_from_db()
    assert (rule.on_failure, rule.no_success_seconds) == (False, 3600)


def test_a_dead_run_of_flaky_raises_an_alert_under_the_demo_s_rule(db):
    seed()
    rule = AlertRule.objects.select_related("job").get()
    now = db_now()
    at = now + timedelta(seconds=1)
    JobRun.objects.create(
        job=rule.job,
        tenant=rule.job.tenant,
        scheduled_at=at,
        created_at=at,
        state=RunState.DEAD,
        started_at=at,
        finished_at=at + timedelta(seconds=1),
        error="RuntimeError: flaky always fails",
    )

    raised = alerts.evaluate_rule(rule, at + timedelta(seconds=5))

    assert raised == 1
    assert Alert.objects.get().job_id == rule.job_id


@pytest.mark.urls("project.urls")
def test_the_root_of_the_deployment_leads_to_the_dashboard(client, db):
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/admin/dashboard/"
