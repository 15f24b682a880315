"""Overlap policies: what a fire does while an earlier run of the same job is still going,
dispatched against the real PostgreSQL (the plan alone: the unit tier's test_overlap)."""

from datetime import timedelta

import pytest

from scheduler_app import dispatch
from scheduler_app.models import AuditEvent, JobRun, RunState
from scheduler_app.worker import execution
from tests.conftest import NOW
from tests.unit.dispatch.test_overlap import T0, T1, T2

GRACE = timedelta(seconds=60)


def dispatch_at(now):
    return dispatch.dispatch_due_jobs(now, limit=10, grace=GRACE)


def test_skip_records_a_fire_while_the_previous_run_is_running(make_job):
    job = make_job(every_seconds=10, anchor_at=T0, next_run_at=T0, overlap_policy="skip")
    dispatch_at(T0)
    first = JobRun.objects.get(job=job)
    JobRun.objects.filter(id=first.id).update(state=RunState.RUNNING)

    dispatch_at(T1)

    second = JobRun.objects.get(job=job, scheduled_at=T1)
    assert second.state == "skipped" and second.reason == f"overlap_skip: run {first.id} still running"


@pytest.mark.django_db(transaction=True)
def test_buffer_one_holds_one_fire_and_releases_it_when_the_run_ends(make_job):
    job = make_job(
        every_seconds=10, anchor_at=T0, next_run_at=T0, overlap_policy="buffer_one", task_name="scheduler_app.echo"
    )
    dispatch_at(T0)
    first = JobRun.objects.get(job=job)
    dispatch_at(T1)
    dispatch_at(T2)

    states = dict(JobRun.objects.filter(job=job).values_list("scheduled_at", "state"))
    assert states == {T0: "queued", T1: "pending", T2: "skipped"}
    assert dispatch.recovery.release_buffered_runs(NOW, limit=10) == []  # the first is still going

    assert execution.execute_run(first.id, 1, worker="w").state == "succeeded"
    released = dispatch.recovery.release_buffered_runs(NOW, limit=10)

    held = JobRun.objects.get(job=job, scheduled_at=T1)
    assert [m.run_id for m in released] == [held.id] and held.state == "queued"


def test_replace_cancels_the_running_run_and_its_late_write_is_refused(make_job):
    job = make_job(every_seconds=10, anchor_at=T0, next_run_at=T0, overlap_policy="replace")
    dispatch_at(T0)
    first = JobRun.objects.get(job=job)
    started = execution.start_run(first.id, 1, worker="w")

    dispatch_at(T1)

    first.refresh_from_db()
    assert first.state == "cancelled" and first.reason.startswith("overlap_replaced")
    assert JobRun.objects.get(job=job, scheduled_at=T1).state == "queued"
    assert execution.finish_run(started, "late").state == "stale"
    assert AuditEvent.objects.filter(run_id=first.id, action="run.cancelled").exists()
