"""Job alerts delivered by signed webhook: real beats raise exactly one alert at a local
receiver, and a hanging receiver does not hold up the beat."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertRule, Job, JobRun, RunState, db_now
from tests.conftest import wait_for
from tests.integration.alerts.test_alerts import TASK
from tests.support.alerts import Receiver


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_beats_raise_exactly_one_alert_when_a_job_stops_succeeding(processes, queue_name, settings):
    tenant = services.tenant_create(slug="beats", name="Beats")
    receiver = Receiver(services.tenant_signing_secrets(tenant, db_now()))
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    env = {
        "CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8",
        "CRONFLEET_ALERT_CHECK_SECONDS": "1",
        "CRONFLEET_ALLOWED_TASKS": "scheduler_app.echo,scheduler_app.fail",
    }
    settings.CRONFLEET_ALLOWED_TASKS = ["scheduler_app.echo", "scheduler_app.fail"]
    job = services.job_create(
        tenant,
        services.JobSpec(name="flaky", task_name="scheduler_app.echo", every=2, queue=queue_name, max_attempts=1),
    )
    try:
        processes.worker(queue_name, **env)
        processes.beat("beat-1", "--max-sleep", "1", **env)
        processes.beat("beat-2", "--max-sleep", "1", **env)
        wait_for(
            lambda: JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).exists(),
            timeout=60,
            what="a first successful run",
        )
        alerts.rule_set(
            job,
            {
                "no_success_seconds": 4,
                "grace_seconds": 2,
                "on_failure": True,
                "webhook_url": receiver.url,
                "cooldown_seconds": 3600,
            },
        )

        # While it succeeds (a run every 2 s): no alert.
        succeeded = JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count()
        wait_for(
            lambda: JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count() >= succeeded + 4,
            timeout=60,
            what="four more successful runs",
        )
        assert Alert.objects.count() == 0 and receiver.received == []

        # The target stops succeeding: one failed-run alert (then the cool-down), then, once
        # no success for 6 s, one dead-man's-switch alert; both reach the receiver once.
        Job.objects.filter(id=job.id).update(task_name="scheduler_app.fail")
        wait_for(lambda: len(receiver.received) >= 2, timeout=60, what="two alerts at the receiver")
        # The beats keep checking every second: later failures are held by the cool-down, and
        # no third alert comes of them.
        wait_for(
            lambda: Alert.objects.filter(kind="failed", suppressed__gte=3).exists(),
            timeout=60,
            what="three later failures held by the failed alert's cool-down",
        )
    finally:
        receiver.shutdown()

    kinds = sorted(alert["kind"] for alert in receiver.received)
    assert kinds == ["failed", "no_success"], receiver.received
    assert receiver.bad == []
    assert Alert.objects.count() == 2 and Alert.objects.filter(delivered_at__isnull=True).count() == 0
    assert Alert.objects.get(kind="failed").suppressed >= 1  # later failures held by the cool-down
    assert {alert["job"] for alert in receiver.received} == {"flaky"}
    assert JobRun.objects.filter(job=job, state__in=[RunState.FAILED, RunState.DEAD]).count() >= 2


class HangingReceiver(Receiver):
    """A Receiver that takes each alert, then answers only once `release` is set."""

    def __init__(self, secrets: list[str]):
        self.arrived, self.release = threading.Event(), threading.Event()
        super().__init__(secrets)

    def took(self) -> None:
        self.arrived.set()
        self.release.wait(120)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_hanging_webhook_receiver_does_not_hold_up_the_beat_and_gets_the_alert_once(processes, queue_name, settings):
    tenant = services.tenant_create(slug="hanging", name="Hanging")
    receiver = HangingReceiver(services.tenant_signing_secrets(tenant, db_now()))
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    # A webhook timeout far beyond the test's waits: only delivery off the beat's thread
    # lets the beat dispatch while the receiver hangs.
    env = {
        "CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8",
        "CRONFLEET_ALERT_CHECK_SECONDS": "1",
        "CRONFLEET_ALERT_DELIVERY_TIMEOUT_SECONDS": "300",
    }
    job = services.job_create(tenant, services.JobSpec(name="every-second", task_name=TASK, every=1, queue=queue_name))
    # No worker: nothing succeeds, so the dead-man's switch raises one alert within seconds.
    alerts.rule_set(job, {"no_success_seconds": 1, "webhook_url": receiver.url})
    try:
        processes.beat("beat-1", "--max-sleep", "1", **env)
        assert receiver.arrived.wait(60), "no alert reached the receiver"
        runs = JobRun.objects.filter(job=job).count()
        wait_for(
            lambda: JobRun.objects.filter(job=job).count() >= runs + 5,
            timeout=60,
            what="five more runs dispatched while the receiver hangs",
        )
        hanging = Alert.objects.get()
        assert hanging.delivered_at is None and hanging.delivering_until is not None  # still being sent
        assert len(receiver.received) == 1

        receiver.release.set()
        wait_for(
            lambda: Alert.objects.filter(delivered_at__isnull=False).exists(),
            timeout=60,
            what="the alert recorded as delivered",
        )
        delivered = Alert.objects.get()
        # Two more checks of the rule (each wakes the delivery thread): nothing is sent again.
        wait_for(
            lambda: AlertRule.objects.get(job=job).checked_until > delivered.delivered_at + timedelta(seconds=2),
            timeout=60,
            what="two more checks after the delivery",
        )
    finally:
        receiver.release.set()
        receiver.shutdown()

    assert [alert["kind"] for alert in receiver.received] == ["no_success"]
    assert receiver.bad == []
    assert Alert.objects.count() == 1 and delivered.delivery_attempts == 1
    assert delivered.delivery_log[-1]["error"] is None
