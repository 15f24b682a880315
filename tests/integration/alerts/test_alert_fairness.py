"""What one tenant's alerts may cost the others (docs/alerts.md): pending alerts taken
tenants in turn, the per-tenant hourly alert and e-mail budgets (suppressed with the reason,
not sent), and the minimum cool-down. Real beats with a hanging receiver: the system tier's
test_alert_fairness."""

from __future__ import annotations

import importlib
from datetime import timedelta
from itertools import count

import pytest
from django.core import mail

from scheduler_app import alerts, services
from scheduler_app.alerts import budget
from scheduler_app.models import Alert, AlertKind, AlertRule, Job, RunState, Tenant, db_now
from tests.support.alerts import arm, run_of

TASK = "scheduler_app.echo"
# The module (the package's own `deliver` is its function of that name).
delivery = importlib.import_module("scheduler_app.alerts.deliver")
_keys = count()


def tenant_with_job(slug: str) -> tuple[Tenant, Job]:
    tenant = services.tenant_create(slug=slug, name=slug.title())
    return tenant, services.job_create(tenant, services.JobSpec(name="flaky", task_name=TASK, cron="* * * * *"))


def pending_alert(job: Job, *, seconds_ago: float) -> Alert:
    at = db_now() - timedelta(seconds=seconds_ago)
    return Alert.objects.create(
        rule=AlertRule.objects.get(job=job),
        job=job,
        tenant=job.tenant,
        kind=AlertKind.FAILED,
        dedup_key=f"flood:{next(_keys)}",
        message=f"{job}: failed",
        raised_at=at,
        next_delivery_at=at,
    )


@pytest.mark.django_db
def test_pending_alerts_are_taken_tenants_in_turn_at_most_k_of_one():
    _, flood = tenant_with_job("flood")
    _, quiet = tenant_with_job("quiet")
    alerts.rule_set(flood, {"on_failure": True})
    alerts.rule_set(quiet, {"on_failure": True})
    flooded = [pending_alert(flood, seconds_ago=60 - i) for i in range(10)]
    late = pending_alert(quiet, seconds_ago=1)  # raised after all of the flood's

    picked = [alert_id for alert_id, _ in delivery.fair_pending(db_now(), limit=8, per_tenant=2)]

    assert picked == [flooded[0].id, late.id, flooded[1].id]


@pytest.fixture(params=["sql", "python"])
def budget_reader(request, monkeypatch):
    """The budgets read by PostgreSQL, and as the embedded SQLite demo reads them: one answer."""
    monkeypatch.setattr(budget, "json_in_sql", lambda: request.param == "sql")


@pytest.mark.django_db
def test_alerts_over_the_tenant_s_hourly_budget_are_recorded_suppressed(settings, budget_reader):
    settings.CRONFLEET_ALERT_TENANT_ALERTS_PER_HOUR = 2
    tenant, job = tenant_with_job("counted")
    others = [
        services.job_create(tenant, services.JobSpec(name=f"also-{i}", task_name=TASK, cron="* * * * *"))
        for i in range(2)
    ]
    now = db_now()
    for minute, each in enumerate([job, *others]):
        arm(each, now, on_failure=True)
        run_of(each, now - timedelta(minutes=10 - minute), RunState.FAILED)

    assert alerts.evaluate_due_rules(now) == 3

    held = Alert.objects.filter(tenant=tenant, delivery_log__0__channel=budget.BUDGET_CHANNEL)
    assert held.count() == 1  # the third: two were recorded for sending within the hour
    assert "budget of 2 alerts per hour" in held.get().delivery_log[0]["suppressed"]


@pytest.mark.django_db
def test_e_mails_over_the_tenant_s_hourly_budget_are_suppressed_with_the_reason(settings, budget_reader):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.CRONFLEET_ALERT_TENANT_EMAILS_PER_HOUR = 5
    _, job = tenant_with_job("mailer")
    _, other = tenant_with_job("mailer-2")
    now = db_now()
    three = ["a@example.com", "b@example.com", "c@example.com"]
    arm(job, now, on_failure=True, emails=three, cooldown_seconds=60)
    run_of(job, now - timedelta(minutes=10), RunState.FAILED)
    arm(other, now, on_failure=True, emails=three)
    run_of(other, now - timedelta(minutes=10), RunState.FAILED)
    assert alerts.evaluate_due_rules(now) == 2
    assert alerts.deliver_pending(now) == 2  # 3 addresses each, one tenant each: within 5
    run_of(job, now + timedelta(seconds=30), RunState.DEAD)
    later = now + timedelta(minutes=2)  # past the cool-down
    assert alerts.evaluate_due_rules(later) == 1

    assert alerts.deliver_pending(later) == 0  # 3 + 3 addresses would be 6

    assert len(mail.outbox) == 2
    held = Alert.objects.get(job=job, delivered_at__isnull=True)
    assert alerts.delivery_status(held) == "suppressed"
    assert held.delivery_log[-1]["channel"] == "email"
    assert "budget of 5 e-mails per hour is spent (3 sent" in held.delivery_log[-1]["suppressed"]
    assert alerts.deliver_pending(later + timedelta(minutes=10)) == 0 and len(mail.outbox) == 2  # never sent later


@pytest.mark.django_db
def test_a_rule_saved_with_a_shorter_cool_down_is_held_to_the_minimum(settings):
    _, job = tenant_with_job("old-rule")
    now = db_now()
    arm(job, now, on_failure=True)
    AlertRule.objects.filter(job=job).update(cooldown_seconds=0)  # saved before the minimum was raised
    for minute in (30, 29, 28):
        run_of(job, now - timedelta(minutes=minute), RunState.FAILED)

    assert alerts.evaluate_due_rules(now) == 1

    assert Alert.objects.get().suppressed == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"cooldown_seconds": 59}, "cooldown_seconds", "must be at least 60 s"),
        ({"emails": [f"ops{i}@example.com" for i in range(11)]}, "emails", "at most 10 addresses"),
    ],
)
def test_a_short_cool_down_and_too_many_recipients_are_refused_naming_the_field(changes, field, message):
    _, job = tenant_with_job("strict")

    with pytest.raises(services.InvalidInput) as refused:
        alerts.rule_set(job, changes)

    assert refused.value.field == field and message in refused.value.message
    assert not AlertRule.objects.filter(job=job).exists()
