"""Jitter on jobs: a new job gets a seed and a jittered first fire, jitter over the gap is
refused naming the field, an edit moves the next fire and keeps the seed, the beat records each
fire at its jittered time, and the API takes it (the schedules: tests/unit/schedules/test_jitter.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import dispatch, schedules, services
from scheduler_app.models import Job, JobRun, RunState, db_now
from tests.unit.schedules.test_jitter import BASE


def test_a_new_job_gets_a_seed_and_its_first_fire_is_jittered(tenant):
    job = services.job_create(
        tenant, services.JobSpec(name="spread", task_name="scheduler_app.echo", cron="0 0 * * *", jitter_seconds=3600)
    )

    assert job.jitter_seconds == 3600
    assert job.next_run_at == schedules.next_fire_after(job.schedule, db_now())
    midnight = job.next_run_at.replace(hour=0, minute=0, second=0, microsecond=0)
    assert timedelta(0) <= job.next_run_at - midnight < timedelta(hours=1)


def test_jitter_over_the_gap_is_refused_naming_the_field(tenant):
    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(
            tenant, services.JobSpec(name="x", task_name="scheduler_app.echo", every=60, jitter_seconds=61)
        )
    assert caught.value.field == "jitter_seconds"
    assert not Job.objects.exists()


def test_an_edit_of_the_jitter_moves_the_next_fire_and_keeps_the_seed(tenant):
    job = services.job_create(tenant, services.JobSpec(name="spread", task_name="scheduler_app.echo", every=3600))
    seed = job.jitter_seed

    edited = services.job_update(job, {"jitter_seconds": 1800})

    assert (edited.jitter_seconds, edited.jitter_seed) == (1800, seed)
    assert edited.next_run_at == schedules.next_fire_after(
        edited.schedule, edited.updated_at - timedelta(microseconds=1)
    )


def test_the_beat_records_each_fire_at_its_jittered_time(make_job):
    job = make_job(cron="*/5 * * * *", jitter_seconds=240, jitter_seed=99, next_run_at=None)
    first = schedules.next_fire_after(job.schedule, BASE)
    Job.objects.filter(id=job.id).update(next_run_at=first)

    dispatch.run_turn(first + timedelta(seconds=1), batch_size=10, grace=timedelta(seconds=60), sweep=False)

    run = JobRun.objects.get(job=job)
    assert (run.scheduled_at, run.state) == (first, RunState.QUEUED)
    job.refresh_from_db()
    assert job.next_run_at == schedules.next_fire_after(job.schedule, first)


def test_the_api_takes_jitter_and_names_it_when_it_is_too_large(db):
    from tests.integration.api.test_api import client_for, errors_of, job_body, make_tenant

    api = client_for(make_tenant())
    made = api.post("/api/v1/jobs/", job_body(schedule={"every": 600}, jitter_seconds=300), format="json")
    assert made.status_code == 201 and made.json()["jitter_seconds"] == 300

    refused = api.patch(f"/api/v1/jobs/{made.json()['id']}/", {"jitter_seconds": 601}, format="json")
    assert refused.status_code == 400 and "jitter_seconds" in errors_of(refused)
    assert Job.objects.get(id=made.json()["id"]).jitter_seconds == 300
