"""Job alerts (scheduler_app/alerts/): the rules, exactly-once recording, cool-down and
delivery by e-mail, against the real PostgreSQL (real beats and a local receiver: the system
tier's test_alerts)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.db import connections, transaction

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertKind, AlertRule, Job, RunState, Tenant, db_now
from tests.support.alerts import arm, run_of

TASK = "scheduler_app.echo"


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="demo", name="Demo")


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="flaky", task_name=TASK, cron="* * * * *"))


def test_a_failed_run_raises_one_alert_and_the_next_check_none(job):
    now = db_now()
    arm(job, now, on_failure=True)
    run_of(job, now - timedelta(minutes=10), RunState.DEAD, error="RuntimeError: down")
    run_of(job, now - timedelta(minutes=9), RunState.SUCCEEDED)

    assert alerts.evaluate_due_rules(now) == 1
    AlertRule.objects.update(next_check_at=now)
    assert alerts.evaluate_due_rules(now + timedelta(seconds=30)) == 0

    alert = Alert.objects.get()
    assert alert.kind == AlertKind.FAILED and alert.message.startswith("dead on attempt 1: RuntimeError: down — run ")


def test_lag_and_duration_rules(job):
    now = db_now()
    arm(job, now, max_start_lag_seconds=30, max_duration_seconds=60, min_duration_seconds=0.5, cooldown_seconds=60)
    run_of(job, now - timedelta(minutes=20), RunState.SUCCEEDED, lag=45)
    run_of(job, now - timedelta(minutes=15), RunState.SUCCEEDED, took=90)
    run_of(job, now - timedelta(minutes=10), RunState.SUCCEEDED, took=0.1)
    run_of(job, now - timedelta(minutes=5), RunState.SUCCEEDED)

    assert alerts.evaluate_due_rules(now) == 3

    assert sorted(Alert.objects.values_list("kind", flat=True)) == ["start_lag", "too_long", "too_short"]


def test_the_cool_down_holds_back_and_counts_alerts_of_the_same_kind(job):
    now = db_now()
    arm(job, now, on_failure=True, cooldown_seconds=3600)
    for minute in (30, 20, 10):
        run_of(job, now - timedelta(minutes=minute), RunState.FAILED)

    alerts.evaluate_due_rules(now)

    alert = Alert.objects.get()
    assert alert.suppressed == 2


def test_the_dead_man_s_switch_fires_once_per_silence(job):
    now = db_now()
    rule = arm(job, now, no_success_seconds=3600, grace_seconds=600)
    AlertRule.objects.filter(id=rule.id).update(last_success_at=now - timedelta(hours=2))

    assert alerts.evaluate_due_rules(now) == 1
    AlertRule.objects.update(next_check_at=now + timedelta(hours=3))
    assert alerts.evaluate_due_rules(now + timedelta(hours=3)) == 0  # the same silence

    alert = Alert.objects.get()
    assert alert.kind == AlertKind.NO_SUCCESS and "no successful run for 2 h" in alert.message


def test_no_alert_while_the_job_succeeds(job):
    now = db_now()
    arm(job, now, no_success_seconds=600, on_failure=True)
    for minute in range(50, 0, -5):
        run_of(job, now - timedelta(minutes=minute), RunState.SUCCEEDED)

    assert alerts.evaluate_due_rules(now) == 0


@pytest.mark.django_db(transaction=True)
def test_a_second_beat_skips_the_rule_the_first_holds(job):
    now = db_now()
    arm(job, now, on_failure=True)
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM scheduler_app_alertrule FOR UPDATE")
            with transaction.atomic():
                assert alerts.claim_due_rules(now, limit=10) == []
    finally:
        other.close()


def test_rules_are_validated_naming_the_field(job):
    with pytest.raises(services.InvalidInput) as bad_url:
        alerts.rule_set(job, {"webhook_url": "file:///etc/passwd"})
    with pytest.raises(services.InvalidInput) as bad_mail:
        alerts.rule_set(job, {"emails": ["ops@example.com", "not an address"]})
    with pytest.raises(services.InvalidInput) as bad_range:
        alerts.rule_set(job, {"min_duration_seconds": 10, "max_duration_seconds": 5})

    assert (bad_url.value.field, bad_mail.value.field, bad_range.value.field) == (
        "webhook_url",
        "emails.1",
        "min_duration_seconds",
    )


def test_an_alert_is_mailed(job, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    now = db_now()
    arm(job, now, on_failure=True, emails=["ops@example.com"])
    run_of(job, now - timedelta(minutes=5), RunState.FAILED, error="boom")
    alerts.evaluate_due_rules(now)

    assert alerts.deliver_pending(now) == 1

    assert mail.outbox[0].to == ["ops@example.com"] and "failed: demo/flaky" in mail.outbox[0].subject
    assert Alert.objects.get().delivered_at == now
