"""What one tenant's alerts may cost the others, with a real beat (docs/alerts.md): delivery
shared fairly between tenants (one tenant's receiver hanging past the delivery timeout), and
the per-tenant hourly alert budget (the rest suppressed, not sent)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertRule, RunState, db_now
from tests.conftest import wait_for
from tests.integration.alerts.test_alert_fairness import TASK, pending_alert, tenant_with_job
from tests.support.alerts import Receiver, arm, run_of


class StuckReceiver(Receiver):
    """Takes each alert and answers only once `release` is set: past any delivery timeout."""

    def __init__(self, secrets: list[str]):
        self.release = threading.Event()
        super().__init__(secrets)

    def took(self) -> None:
        self.release.wait(120)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_tenant_s_hanging_receiver_does_not_hold_up_another_tenant_s_alerts(processes, settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    flood_tenant, flood = tenant_with_job("flood")
    quiet_tenant, quiet = tenant_with_job("quiet")
    stuck = StuckReceiver(services.tenant_signing_secrets(flood_tenant, db_now()))
    fast = Receiver(services.tenant_signing_secrets(quiet_tenant, db_now()))
    alerts.rule_set(flood, {"on_failure": True, "webhook_url": stuck.url})
    # The flood: 40 alerts recorded, each hanging its delivery for the whole timeout (3 s):
    # sent one after another, they hold everything behind them for two minutes.
    for i in range(40):
        pending_alert(flood, seconds_ago=120 - i)
    env = {
        "CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8",
        "CRONFLEET_ALERT_CHECK_SECONDS": "1",
        "CRONFLEET_ALERT_DELIVERY_TIMEOUT_SECONDS": "3",
        "CRONFLEET_ALERT_DELIVERY_THREADS": "4",
        "CRONFLEET_ALERT_DELIVERIES_PER_TENANT": "2",
    }
    try:
        processes.beat("beat-1", "--max-sleep", "1", **env)
        wait_for(lambda: len(stuck.received) >= 2, timeout=60, what="the flood's first alerts at its receiver")
        # The quiet tenant's job fails once: its beat-evaluated alert goes out while the flood hangs.
        now = db_now()
        arm(quiet, now, on_failure=True, webhook_url=fast.url)
        run_of(quiet, now - timedelta(minutes=1), RunState.FAILED, error="boom")

        wait_for(lambda: fast.received, timeout=30, what="the quiet tenant's alert delivered during the flood")
        assert Alert.objects.filter(job=flood, delivered_at__isnull=True).count() >= 30  # the flood still hangs
    finally:
        stuck.release.set()
        stuck.shutdown()
        fast.shutdown()

    assert [alert["tenant"] for alert in fast.received] == ["quiet"] and fast.bad == []
    assert Alert.objects.get(job=quiet).delivered_at is not None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_sends_a_tenant_s_alerts_up_to_its_hourly_budget_and_suppresses_the_rest(processes, settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    tenant = services.tenant_create(slug="noisy", name="Noisy")
    receiver = Receiver(services.tenant_signing_secrets(tenant, db_now()))
    now = db_now()
    jobs = [
        services.job_create(tenant, services.JobSpec(name=f"flaky-{i}", task_name=TASK, cron="* * * * *"))
        for i in range(3)
    ]
    for minute, job in enumerate(jobs):
        arm(job, now, on_failure=True, webhook_url=receiver.url)
        run_of(job, now - timedelta(minutes=10 - minute), RunState.FAILED, error="boom")
    env = {
        "CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8",
        "CRONFLEET_ALERT_CHECK_SECONDS": "1",
        "CRONFLEET_ALERT_TENANT_ALERTS_PER_HOUR": "2",
    }
    try:
        processes.beat("beat-1", "--max-sleep", "1", **env)
        wait_for(
            lambda: Alert.objects.filter(tenant=tenant).count() == 3 and len(receiver.received) >= 2,
            timeout=60,
            what="three alerts recorded, two of them at the receiver",
        )
        # Two more checks of every rule: nothing more is sent.
        checked = db_now() + timedelta(seconds=2)
        wait_for(
            lambda: all(rule.checked_until > checked for rule in AlertRule.objects.filter(job__tenant=tenant)),
            timeout=60,
            what="two more checks",
        )
    finally:
        receiver.shutdown()

    assert len(receiver.received) == 2
    suppressed = Alert.objects.get(tenant=tenant, delivered_at__isnull=True)
    assert alerts.delivery_status(suppressed) == "suppressed" and suppressed.delivery_attempts == 0
    assert "budget of 2 alerts per hour" in suppressed.delivery_log[-1]["suppressed"]
