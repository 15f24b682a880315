"""A fire due before a pause commits ends as a run or as a skipped row ("paused"), never as
nothing: the pause waits for a beat holding the job, and records a due fire no beat took."""

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection

from scheduler_app import dispatch, services
from scheduler_app.models import JobRun, RunState, db_now


def test_a_fire_due_just_before_the_pause_is_recorded_as_skipped(make_job):
    due = db_now() - timedelta(milliseconds=5)
    job = make_job(every_seconds=60, anchor_at=due, next_run_at=due)

    services.job_pause(job, note="maintenance")

    run = JobRun.objects.get(job=job)
    assert (run.scheduled_at, run.state) == (due, RunState.SKIPPED) and run.reason.startswith("paused: due at")
    services.job_resume(job)  # the resume finds that fire recorded: still one row for it
    assert JobRun.objects.filter(job=job, scheduled_at=due).count() == 1


def test_a_bulk_pause_records_the_due_fires_too(make_job, tenant):
    due = db_now() - timedelta(milliseconds=5)
    jobs = [make_job(every_seconds=60, anchor_at=due, next_run_at=due, tags=["night"]) for _ in range(3)]
    later = make_job(every_seconds=60, anchor_at=due, next_run_at=due + timedelta(hours=1), tags=["night"])

    assert services.jobs_bulk(tenant, tag="night", action="pause").count == 4

    assert sorted(JobRun.objects.values_list("job_id", "state")) == sorted((j.id, "skipped") for j in jobs)
    assert not JobRun.objects.filter(job=later).exists()


def test_a_one_off_keeps_its_fire_for_the_resume(make_job):
    due = db_now() - timedelta(milliseconds=5)
    job = make_job(run_at=due, next_run_at=due, cron="")

    services.job_pause(job)

    assert not JobRun.objects.filter(job=job).exists()


@pytest.mark.django_db(transaction=True)
def test_a_pause_waits_for_the_beat_that_claimed_the_fire(make_job):
    """A second connection claims the job as a beat does (row lock, run recorded, next fire
    advanced); the pause, issued meanwhile, waits and then finds nothing due: one run, the
    beat's, and no skipped row."""
    due = db_now() - timedelta(milliseconds=5)
    job = make_job(every_seconds=60, anchor_at=due, next_run_at=due)
    db = connection.settings_dict
    beat = psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"] or "postgres", dbname=db["NAME"]
    )
    beat.execute("SELECT id FROM scheduler_app_job WHERE id = %s FOR NO KEY UPDATE SKIP LOCKED", [job.id])
    paused = threading.Event()

    def pause():
        services.job_pause(job)
        connection.close()
        paused.set()

    thread = threading.Thread(target=pause)
    thread.start()
    assert not paused.wait(0.5)  # waiting for the beat's lock
    beat.execute(
        "INSERT INTO scheduler_app_jobrun (job_id, tenant_id, scheduled_at, state, created_at, "
        "enqueued_at, dispatched_at) VALUES (%s, %s, %s, 'queued', now(), now(), now())",
        [job.id, job.tenant_id, due],
    )
    beat.execute("UPDATE scheduler_app_job SET next_run_at = %s WHERE id = %s", [due + timedelta(seconds=60), job.id])
    beat.commit()
    beat.close()
    thread.join(timeout=10)

    assert paused.is_set()
    assert list(JobRun.objects.filter(job=job).values_list("scheduled_at", "state")) == [(due, "queued")]
    job.refresh_from_db()
    assert not job.enabled
    assert dispatch.claim.claim_due_jobs(db_now(), limit=10) == []
