"""Pauses that run out, with real beats: one resumed and firing again, one alerted once at a
webhook receiver, with two beats running."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertKind, AuditEvent, Job, JobRun, RunState, db_now
from tests.conftest import wait_for
from tests.support.alerts import Receiver


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_beats_resume_one_expired_pause_and_alert_the_other_once(processes, queue_name, settings):
    tenant = services.tenant_create(slug="pauses", name="Pauses")
    receiver = Receiver(services.tenant_signing_secrets(tenant, db_now()))
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    env = {"CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8", "CRONFLEET_ALERT_CHECK_SECONDS": "1"}
    spec = dict(task_name="scheduler_app.echo", every=2, queue=queue_name, max_attempts=1)
    back = services.job_create(tenant, services.JobSpec(name="back-soon", **spec))
    held = services.job_create(tenant, services.JobSpec(name="held", **spec))
    alerts.rule_set(held, {"on_failure": True, "webhook_url": receiver.url})
    services.job_pause(back, note="deploy", actor="api:ann", until=db_now() + timedelta(seconds=3), on_expiry="resume")
    services.job_pause(held, note="vendor down", actor="api:ann", until=db_now() + timedelta(seconds=3))
    try:
        processes.worker(queue_name, **env)
        processes.beat("beat-1", "--max-sleep", "1", **env)
        processes.beat("beat-2", "--max-sleep", "1", **env)

        wait_for(
            lambda: JobRun.objects.filter(job=back, state=RunState.SUCCEEDED).count() >= 3,
            timeout=90,
            what="the job whose pause said resume firing again",
        )
        wait_for(lambda: receiver.received, timeout=60, what="the pause_expired alert at the receiver")
        # Both beats keep taking their alerts turn every second: let them take several more.
        resumed_runs = JobRun.objects.filter(job=back, state=RunState.SUCCEEDED).count()
        wait_for(
            lambda: JobRun.objects.filter(job=back, state=RunState.SUCCEEDED).count() >= resumed_runs + 3,
            timeout=60,
            what="three more runs, the beats' alert turns going on meanwhile",
        )
    finally:
        receiver.shutdown()

    assert [alert["kind"] for alert in receiver.received] == [AlertKind.PAUSE_EXPIRED]
    assert "paused, not healthy" in receiver.received[0]["message"]
    assert Alert.objects.filter(job=held).count() == 1
    assert not Job.objects.get(id=held.id).enabled
    assert not JobRun.objects.filter(job=held).exclude(state=RunState.SKIPPED).exists()
    resumes = AuditEvent.objects.filter(job=back, action="job.resumed")
    assert [(event.actor, event.detail["paused_by"]) for event in resumes] == [("beat:pause-expired", "api:ann")]
