"""Pauses that run out: resumed (audited) or alerted once, with any number of beats."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from scheduler_app import alerts, services
from scheduler_app.alerts import pauses as expiry
from scheduler_app.models import Alert, AlertKind, AuditEvent, Job, db_now
from tests.support.alerts import arm

LATER = timedelta(hours=2)


def paused(job: Job, *, on_expiry: str, note: str = "disk swap", by: str = "api:ann") -> Job:
    return services.job_pause(job, note=note, actor=by, until=db_now() + timedelta(hours=1), on_expiry=on_expiry)


def test_a_pause_that_says_resume_resumes_the_job_at_its_end_audited(make_job):
    job = paused(make_job(cron="*/5 * * * *"), on_expiry="resume")

    assert alerts.expire_pauses(db_now()).resumed == 0  # not yet
    done = alerts.expire_pauses(db_now() + LATER)

    job.refresh_from_db()
    assert (done.resumed, done.alerted) == (1, 0)
    assert job.enabled and job.paused_until is None and job.paused_by == "" and job.next_run_at is not None
    event = AuditEvent.objects.get(job=job, action="job.resumed")
    assert event.actor == expiry.ACTOR
    assert event.detail["paused_by"] == "api:ann" and "ran out" in event.detail["reason"]


def test_a_pause_that_says_alert_raises_one_alert_and_stays_paused(make_job):
    job = make_job(name="nightly")
    arm(job, db_now(), on_failure=True)  # the alert goes to the job's rule when it has one
    job = paused(job, on_expiry="alert", note="waiting for the vendor")

    first = alerts.expire_pauses(db_now() + LATER)
    second = alerts.expire_pauses(db_now() + LATER + LATER)

    job.refresh_from_db()
    alert = Alert.objects.get(job=job)
    assert (first.alerted, second.alerted) == (1, 0)
    assert not job.enabled and job.pause_alerted_at is not None
    assert alert.kind == AlertKind.PAUSE_EXPIRED and alert.rule_id == job.alert_rule.id
    assert alert.message.startswith("paused, not healthy: paused") and "waiting for the vendor" in alert.message
    assert "api:ann" in alert.message and alert.detail["paused_by"] == "api:ann"
    assert AuditEvent.objects.filter(job=job, action="job.pause_expired").count() == 1


def test_a_job_without_a_rule_still_has_its_alert_recorded(make_job):
    job = paused(make_job(), on_expiry="alert")

    alerts.expire_pauses(db_now() + LATER)

    assert Alert.objects.get(job=job).rule_id is None


def test_a_pause_without_an_end_never_runs_out(make_job):
    job = services.job_pause(make_job(), note="for good", actor="cli")

    assert alerts.expire_pauses(db_now() + timedelta(days=400)) == alerts.Expired()
    job.refresh_from_db()
    assert not job.enabled


def test_pausing_again_after_a_resume_alerts_again(make_job):
    job = paused(make_job(), on_expiry="alert")
    alerts.expire_pauses(db_now() + LATER)
    services.job_resume(job, actor="cli")
    job = paused(job, on_expiry="alert")

    alerts.expire_pauses(db_now() + LATER)

    assert Alert.objects.filter(job=job, kind=AlertKind.PAUSE_EXPIRED).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_second_beat_skips_the_pause_the_first_holds(make_job):
    job = paused(make_job(), on_expiry="resume")
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:  # another beat holds the job mid-turn
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM scheduler_app_job WHERE id = %s FOR UPDATE", [job.id])
            with transaction.atomic():
                assert expiry.claim_expired(db_now() + LATER, limit=10) == []
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_two_beats_at_once_resume_and_alert_each_pause_once(make_job):
    resumes = [paused(make_job(), on_expiry="resume").id for _ in range(15)]
    alerted = [paused(make_job(), on_expiry="alert").id for _ in range(15)]
    now = db_now() + LATER
    start = threading.Barrier(2)
    results: list[alerts.Expired] = []
    errors: list[BaseException] = []

    def beat() -> None:
        try:
            start.wait(timeout=30)
            for _ in range(3):  # each beat comes back for what the other held
                results.append(alerts.expire_pauses(now, limit=4))
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
        finally:
            connection.close()

    beats = [threading.Thread(target=beat) for _ in range(2)]
    for thread in beats:
        thread.start()
    for thread in beats:
        thread.join(timeout=120)
    while sum(r.resumed + r.alerted for r in results) < 30 and not errors:  # what both left over
        done = alerts.expire_pauses(now)
        if not done.resumed and not done.alerted:
            break
        results.append(done)

    assert errors == []
    assert sum(r.resumed for r in results) == 15 and sum(r.alerted for r in results) == 15
    assert AuditEvent.objects.filter(job_id__in=resumes, action="job.resumed").count() == 15
    assert Alert.objects.filter(job_id__in=alerted, kind=AlertKind.PAUSE_EXPIRED).count() == 15
    assert Job.objects.filter(id__in=resumes, enabled=True).count() == 15


def test_a_paused_job_given_a_new_end_alerts_again_when_that_one_passes(make_job):
    job = paused(make_job(), on_expiry="alert")
    alerts.expire_pauses(db_now() + LATER)

    job = services.job_pause(job, actor="api:bob", until=db_now() + timedelta(hours=3))
    first_end = alerts.expire_pauses(db_now() + LATER)
    second_end = alerts.expire_pauses(db_now() + LATER + LATER)

    assert (job.paused_by, job.paused_note, job.pause_alerted_at) == ("api:bob", "disk swap", None)
    assert (first_end.alerted, second_end.alerted) == (0, 1)
    assert Alert.objects.filter(job=job, kind=AlertKind.PAUSE_EXPIRED).count() == 2
    assert AuditEvent.objects.filter(job=job, action="job.pause_extended", actor="api:bob").count() == 1
