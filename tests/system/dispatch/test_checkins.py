"""Check-ins with a real beat: a cron-like loop that pings, misses, fails and recovers (the rest
of the check-ins: tests/integration/dispatch/test_checkins.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertKind, JobRun, RunState
from tests.conftest import take_broker_messages, wait_for
from tests.integration.dispatch.test_checkins import key_of, monitored, ping

# --- a real beat ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_with_a_cron_like_loop_that_pings_misses_fails_and_recovers(processes, queue_name, settings):
    settings.CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS = 0
    tenant = services.tenant_create(slug="crons", name="Crons")
    job = monitored(tenant, "nightly", grace=4, queue=queue_name, cron="", every=8)
    alerts.rule_set(job, {"on_failure": True, "cooldown_seconds": 0})
    key, client = key_of(job), Client()
    processes.beat(
        "beat", "--max-sleep", "1", CRONFLEET_ALERT_CHECK_SECONDS="1", CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS="0"
    )

    def next_fire(after: int) -> JobRun:
        return wait_for(
            lambda: (
                JobRun.objects.filter(job=job, state=RunState.PENDING)
                .exclude(id__in=seen)
                .order_by("scheduled_at")
                .first()
            ),
            timeout=60,
            what=f"fire {after + 1} waiting for its ping",
        )

    seen: list[int] = []
    # The loop of a machine's cron: fire 1 runs and pings on time, fire 2 does not run at
    # all, fire 3 runs and fails, fire 4 runs fine again.
    first = next_fire(0)
    seen.append(first.id)
    assert ping(client, key, "start").status_code == 200
    assert ping(client, key, body=b"ok").status_code == 200

    missed = next_fire(1)
    seen.append(missed.id)
    wait_for(
        lambda: JobRun.objects.filter(id=missed.id, state=RunState.FAILED).exists(),
        timeout=60,
        what="the beat to mark the silent fire missed",
    )
    missed_alert = wait_for(
        lambda: Alert.objects.filter(job=job, run_id=missed.id).first(), timeout=60, what="the missed fire's alert"
    )

    failing = next_fire(2)
    seen.append(failing.id)
    assert ping(client, key, "1", body=b"exit 1: disk full").status_code == 200
    failed_alert = wait_for(
        lambda: Alert.objects.filter(job=job, run_id=failing.id).first(), timeout=60, what="the failed run's alert"
    )

    recovered = next_fire(3)
    seen.append(recovered.id)
    assert ping(client, key, "0", body=b"ok again").status_code == 200

    states = {run.id: (run.state, run.reason) for run in JobRun.objects.filter(id__in=seen)}
    assert states == {
        first.id: (RunState.SUCCEEDED, ""),
        missed.id: (RunState.FAILED, "missed: no check-in within 4 s"),
        failing.id: (RunState.FAILED, "checkin: failed with exit status 1"),
        recovered.id: (RunState.SUCCEEDED, ""),
    }
    assert missed_alert.kind == AlertKind.FAILED and "missed: no check-in within 4 s" in missed_alert.message
    assert failed_alert.kind == AlertKind.FAILED and "exit status 1" in failed_alert.message
    assert take_broker_messages(queue_name) == []  # the beat never sent a monitored fire to a broker
