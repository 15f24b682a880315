"""A real beat: a monitored job misses its check-in, goes down, its down alert reaches a
Slack-compatible hook, it pings success and its "back up" alert follows, once; its status
reads down, then up (the rest: tests/integration/alerts/test_checkin_up_and_chat.py)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from scheduler_app import alerts, services
from scheduler_app.ledger import checkstatus
from scheduler_app.models import Alert, AlertKind, Job, JobRun, RunState
from tests.conftest import wait_for
from tests.integration.dispatch.test_checkins import key_of, monitored, ping
from tests.support.http_receiver import Receiver


def status(job: Job) -> str | None:
    return checkstatus.status_of(checkstatus.with_check_fields(Job.objects.filter(id=job.id)).get())


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_alerts_a_missed_check_in_and_its_recovery_to_a_chat_hook(processes, queue_name, settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS = 0
    hook = Receiver([])
    try:
        tenant = services.tenant_create(slug="crons", name="Crons")
        job = monitored(tenant, "nightly", grace=2, queue=queue_name, cron="", every=6)
        alerts.rule_set(job, {"on_failure": True, "cooldown_seconds": 0, "chat_url": hook.url})
        processes.beat(
            "beat",
            "--max-sleep",
            "1",
            CRONFLEET_ALERT_CHECK_SECONDS="1",
            CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS="0",
            CRONFLEET_HTTP_ALLOWED_NETWORKS="127.0.0.0/8",
        )

        missed = wait_for(
            lambda: JobRun.objects.filter(job=job, state=RunState.FAILED, reason__startswith="missed:").first(),
            timeout=60,
            what="the beat to mark a silent fire missed",
        )
        assert status(job) in ("down", "late")  # late once the next fire waits for its ping
        wait_for(lambda: len(hook.requests) >= 1, timeout=60, what="the down alert at the chat hook")
        waiting = wait_for(
            lambda: JobRun.objects.filter(
                job=job, state=RunState.PENDING, scheduled_at__gt=missed.scheduled_at
            ).first(),
            timeout=60,
            what="the next fire waiting for its ping",
        )
        assert ping(Client(), key_of(job), body=b"done").status_code == 200
        assert JobRun.objects.get(id=waiting.id).state == RunState.SUCCEEDED
        assert status(job) == "up"
        up = wait_for(
            lambda: Alert.objects.filter(job=job, kind=AlertKind.CHECKIN_UP, delivered_at__isnull=False).first(),
            timeout=60,
            what="the back-up alert delivered",
        )
    finally:
        Job.objects.filter(tenant__slug="crons").update(enabled=False)  # no more fires to miss
        hook.close()

    texts = [json.loads(body)["text"] for _, _, _, body in hook.requests]
    assert texts[0].startswith(
        ":red_circle: *failed* crons/nightly: failed on attempt 1: missed: no check-in within 2 s"
    )
    ups = [text for text in texts if "*checkin_up*" in text]
    assert len(ups) == 1 and ups[0].startswith(":large_green_circle: *checkin_up* crons/nightly: back up after ")
    assert up.run_id == waiting.id and alerts.where_sent(up) == "Slack hook at 127.0.0.1"
    assert Alert.objects.filter(kind=AlertKind.CHECKIN_UP).count() == 1
