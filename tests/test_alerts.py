"""Job alerts (scheduler_app/alerts/): the rules, exactly-once recording, cool-down,
delivery by signed webhook and e-mail, and real beats raising one alert at a local receiver."""

from __future__ import annotations

import http.server
import json
import threading
import time
from datetime import datetime, timedelta

import pytest
from django.core import mail
from django.db import connections, transaction

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertKind, AlertRule, Job, JobRun, RunState, Tenant, db_now
from scheduler_app.targets.http import signing as webhooks
from tests.conftest import wait_for

TASK = "scheduler_app.echo"


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="demo", name="Demo")


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="flaky", task_name=TASK, cron="* * * * *"))


def run_of(job: Job, at: datetime, state: str, *, lag: float = 1.0, took: float = 5.0, **fields) -> JobRun:
    return JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=at, state=state, created_at=at,
                                 started_at=at + timedelta(seconds=lag),
                                 finished_at=at + timedelta(seconds=lag + took), **fields)


def arm(job: Job, now: datetime, **changes) -> AlertRule:
    rule = alerts.rule_set(job, changes, actor="test")
    AlertRule.objects.filter(id=rule.id).update(checked_until=now - timedelta(hours=1), next_check_at=now,
                                                last_success_at=rule.last_success_at and now - timedelta(hours=1))
    rule.refresh_from_db()
    return rule


def test_a_failed_run_raises_one_alert_and_the_next_check_none(job):
    now = db_now()
    arm(job, now, on_failure=True)
    run_of(job, now - timedelta(minutes=10), RunState.DEAD, error="RuntimeError: down")
    run_of(job, now - timedelta(minutes=9), RunState.SUCCEEDED)

    assert alerts.evaluate_due_rules(now) == 1
    AlertRule.objects.update(next_check_at=now)
    assert alerts.evaluate_due_rules(now + timedelta(seconds=30)) == 0

    alert = Alert.objects.get()
    assert alert.kind == AlertKind.FAILED and "ended dead" in alert.message and "RuntimeError: down" in alert.message


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
        "webhook_url", "emails.1", "min_duration_seconds")


def test_an_alert_is_mailed(job, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    now = db_now()
    arm(job, now, on_failure=True, emails=["ops@example.com"])
    run_of(job, now - timedelta(minutes=5), RunState.FAILED, error="boom")
    alerts.evaluate_due_rules(now)

    assert alerts.deliver_pending(now) == 1

    assert mail.outbox[0].to == ["ops@example.com"] and "failed: demo/flaky" in mail.outbox[0].subject
    assert Alert.objects.get().delivered_at == now


# --- real beats, a local receiver ------------------------------------------------------------


class Receiver(http.server.ThreadingHTTPServer):
    """Collects the alerts POSTed to it, verifying each signature."""

    def __init__(self, secrets: list[str]):
        self.secrets, self.received, self.bad = secrets, [], []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    webhooks.verify(outer.secrets, dict(self.headers), body, now=int(time.time()))
                    outer.received.append(json.loads(body))
                except webhooks.InvalidSignature as exc:
                    outer.bad.append(exc.reason)
                outer.took()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def took(self) -> None:
        """Called after each alert is taken, before the answer."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/alerts"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_beats_raise_exactly_one_alert_when_a_job_stops_succeeding(processes, queue_name, settings):
    tenant = services.tenant_create(slug="beats", name="Beats")
    receiver = Receiver(services.tenant_signing_secrets(tenant, db_now()))
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    env = {"CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8", "CRONFLEET_ALERT_CHECK_SECONDS": "1",
           "CRONFLEET_ALLOWED_TASKS": "scheduler_app.echo,scheduler_app.fail"}
    settings.CRONFLEET_ALLOWED_TASKS = ["scheduler_app.echo", "scheduler_app.fail"]
    job = services.job_create(tenant, services.JobSpec(name="flaky", task_name="scheduler_app.echo", every=2,
                                                       queue=queue_name, max_attempts=1))
    try:
        processes.worker(queue_name, **env)
        processes.beat("beat-1", "--max-sleep", "1", **env)
        processes.beat("beat-2", "--max-sleep", "1", **env)
        wait_for(lambda: JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).exists(), timeout=60,
                 what="a first successful run")
        alerts.rule_set(job, {"no_success_seconds": 4, "grace_seconds": 2, "on_failure": True,
                              "webhook_url": receiver.url, "cooldown_seconds": 3600})

        # While it succeeds (a run every 2 s): no alert.
        succeeded = JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count()
        wait_for(lambda: JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count() >= succeeded + 4,
                 timeout=60, what="four more successful runs")
        assert Alert.objects.count() == 0 and receiver.received == []

        # The target stops succeeding: one failed-run alert (then the cool-down), then, once
        # no success for 6 s, one dead-man's-switch alert; both reach the receiver once.
        Job.objects.filter(id=job.id).update(task_name="scheduler_app.fail")
        wait_for(lambda: len(receiver.received) >= 2, timeout=60, what="two alerts at the receiver")
        time.sleep(5)  # both beats keep checking every second
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
def test_a_hanging_webhook_receiver_does_not_hold_up_the_beat_and_gets_the_alert_once(processes, queue_name,
                                                                                      settings):
    tenant = services.tenant_create(slug="hanging", name="Hanging")
    receiver = HangingReceiver(services.tenant_signing_secrets(tenant, db_now()))
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    # A webhook timeout far beyond the test's waits: only delivery off the beat's thread
    # lets the beat dispatch while the receiver hangs.
    env = {"CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8", "CRONFLEET_ALERT_CHECK_SECONDS": "1",
           "CRONFLEET_ALERT_DELIVERY_TIMEOUT_SECONDS": "300"}
    job = services.job_create(tenant, services.JobSpec(name="every-second", task_name=TASK, every=1,
                                                       queue=queue_name))
    # No worker: nothing succeeds, so the dead-man's switch raises one alert within seconds.
    alerts.rule_set(job, {"no_success_seconds": 1, "webhook_url": receiver.url})
    try:
        processes.beat("beat-1", "--max-sleep", "1", **env)
        assert receiver.arrived.wait(60), "no alert reached the receiver"
        runs = JobRun.objects.filter(job=job).count()
        wait_for(lambda: JobRun.objects.filter(job=job).count() >= runs + 5, timeout=60,
                 what="five more runs dispatched while the receiver hangs")
        hanging = Alert.objects.get()
        assert hanging.delivered_at is None and hanging.delivering_until is not None  # still being sent
        assert len(receiver.received) == 1

        receiver.release.set()
        wait_for(lambda: Alert.objects.filter(delivered_at__isnull=False).exists(), timeout=60,
                 what="the alert recorded as delivered")
        delivered = Alert.objects.get()
        # Two more checks of the rule (each wakes the delivery thread): nothing is sent again.
        wait_for(lambda: AlertRule.objects.get(job=job).checked_until > delivered.delivered_at + timedelta(seconds=2),
                 timeout=60, what="two more checks after the delivery")
    finally:
        receiver.release.set()
        receiver.shutdown()

    assert [alert["kind"] for alert in receiver.received] == ["no_success"]
    assert receiver.bad == []
    assert Alert.objects.count() == 1 and delivered.delivery_attempts == 1
    assert delivered.delivery_log[-1]["error"] is None
