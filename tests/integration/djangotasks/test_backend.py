"""Cronfleet's django.tasks backend on the real database: enqueue records a one-off job and
its run in the caller's transaction and publishes after commit; run_after waits for the beat;
the worker's execution runs the task; get_result reads the run. On Django 6.0 (django.tasks)
and on 5.2 with the django-tasks backport, whichever is installed."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.db import transaction

from scheduler_app import dispatch, taskapi
from scheduler_app.models import Job, JobRun, RunState, Tenant, Trigger, db_now
from scheduler_app.worker import execution

if taskapi.api is None:
    pytest.skip("neither django.tasks nor the django-tasks backport is installed", allow_module_level=True)

from tests.support import djtasks  # noqa: E402 - defines tasks: only with the task API present

PUBLISH = "scheduler_app.services.taskcalls.publish_runs"
Status = taskapi.api.TaskResultStatus


@pytest.fixture
def tenant(db) -> Tenant:
    return Tenant.objects.create(slug="djtasks", name="django.tasks")


def test_enqueue_records_a_one_off_job_and_its_run_and_publishes_after_commit(
    tenant, django_capture_on_commit_callbacks
):
    with mock.patch(PUBLISH) as publish:
        with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
            result = djtasks.add.enqueue(2, 3)
        published_before_commit = publish.called
        for callback in callbacks:
            callback()

    assert not published_before_commit
    job = Job.objects.get(id=int(result.id))
    assert job.task_name == "django:tests.support.djtasks.add"
    assert (job.args, job.kwargs, job.next_run_at, job.max_attempts) == ([2, 3], {}, None, 2)
    run = JobRun.objects.get(job=job)
    assert (run.state, run.trigger, run.scheduled_at) == (RunState.QUEUED, Trigger.SCHEDULE, job.run_at)
    (messages,) = publish.call_args.args
    assert [m.run_id for m in messages] == [run.id]
    assert result.status == Status.READY


def test_a_rolled_back_enqueue_leaves_nothing(tenant, django_capture_on_commit_callbacks):
    with mock.patch(PUBLISH) as publish, django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            djtasks.add.enqueue(1, 1)
            raise RuntimeError("the caller's transaction fails")

    assert not Job.objects.exists() and not JobRun.objects.exists()
    publish.assert_not_called()


def test_the_worker_runs_an_enqueued_task_and_get_result_reads_it(tenant, django_capture_on_commit_callbacks):
    with mock.patch(PUBLISH), django_capture_on_commit_callbacks(execute=True):
        result = djtasks.add.enqueue(2, 3)
    run = JobRun.objects.get(job_id=int(result.id))

    assert execution.execute_run(run.id, 1, worker="w1").state == RunState.SUCCEEDED

    result.refresh()
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1 and result.worker_ids == ["w1"]
    assert result.started_at is not None and result.finished_at >= result.started_at
    again = djtasks.add.get_result(result.id)
    assert (again.status, again.return_value, again.args) == (Status.SUCCESSFUL, 5, [2, 3])


def test_a_task_with_context_learns_its_fire_attempt_and_id_and_its_queue_and_priority_map(
    tenant, django_capture_on_commit_callbacks
):
    with mock.patch(PUBLISH), django_capture_on_commit_callbacks(execute=True):
        result = djtasks.describe.enqueue(label="x")
    job = Job.objects.get(id=int(result.id))
    run = JobRun.objects.get(job=job)

    execution.execute_run(run.id, 1, worker="w1")

    value = djtasks.describe.get_result(result.id).return_value
    assert value == {"label": "x", "attempt": 1, "result_id": result.id, "fire_key": run.fire_key}
    assert (job.queue, job.priority) == ("reports", 7)


def test_a_failing_task_retries_by_the_jobs_policy_then_ends_dead_with_its_errors(
    tenant, django_capture_on_commit_callbacks
):
    with mock.patch(PUBLISH), django_capture_on_commit_callbacks(execute=True):
        result = djtasks.boom.enqueue()
    run = JobRun.objects.get(job_id=int(result.id))

    assert execution.execute_run(run.id, 1, worker="w1").state == RunState.RETRYING
    assert djtasks.boom.get_result(result.id).status == Status.READY
    JobRun.objects.filter(id=run.id).update(state=RunState.QUEUED, attempt=2)  # as the beat requeues it
    assert execution.execute_run(run.id, 2, worker="w2").state == RunState.DEAD

    result.refresh()
    assert result.status == Status.FAILED
    assert result.worker_ids == ["w1", "w2"]
    assert [error.exception_class_path for error in result.errors] == ["builtins.ValueError"] * 2
    assert result.errors[-1].exception_class is ValueError
    assert "boom went the task" in result.errors[-1].traceback
    assert 'raise ValueError("boom went the task")' in result.errors[-1].traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018 - Django's TaskResult raises for a failed task


def test_a_task_the_worker_cannot_import_fails_in_one_line_naming_it(tenant, django_capture_on_commit_callbacks):
    with mock.patch(PUBLISH), django_capture_on_commit_callbacks(execute=True):
        result = djtasks.add.enqueue(1, 2)
    Job.objects.filter(id=int(result.id)).update(task_name="django:tests.support.gone.add")
    run = JobRun.objects.get(job_id=int(result.id))

    outcome = execution.execute_run(run.id, 1, worker="w1")

    assert outcome.state == RunState.FAILED
    run.refresh_from_db()
    assert "\n" not in run.error
    assert run.error.startswith("django task 'tests.support.gone.add' is not importable in this worker: ")


def test_run_after_becomes_a_one_off_fire_that_the_beat_records(tenant, django_capture_on_commit_callbacks):
    later = db_now() + timedelta(hours=1)
    with mock.patch(PUBLISH) as publish, django_capture_on_commit_callbacks(execute=True):
        result = djtasks.add.using(run_after=later).enqueue(4, 4)
    job = Job.objects.get(id=int(result.id))

    assert (job.run_at, job.next_run_at) == (later, later)
    assert not JobRun.objects.filter(job=job).exists()
    publish.assert_not_called()
    assert djtasks.add.get_result(result.id).status == Status.READY

    dispatched = dispatch.dispatch_due_jobs(later + timedelta(seconds=1), limit=10, grace=timedelta(minutes=10))

    assert dispatched.claimed == 1
    run = JobRun.objects.get(job=job)
    assert run.scheduled_at == later


def test_get_result_of_an_unknown_id_raises_django_s_error(tenant):
    with pytest.raises(taskapi.ResultDoesNotExist):
        djtasks.add.get_result("999999999")
    with pytest.raises(taskapi.ResultDoesNotExist):
        djtasks.add.get_result("not-a-number")


def test_a_job_of_another_tenant_may_not_name_a_django_task(db):
    from scheduler_app import services
    from scheduler_app.validation import InvalidInput

    other = Tenant.objects.create(slug="other", name="Other")

    with pytest.raises(InvalidInput) as refused:
        services.job_create(
            other, services.JobSpec(name="x", cron="* * * * *", task_name="django:tests.support.djtasks.add")
        )

    assert refused.value.field == "task"
    assert "bound to a Cronfleet task backend of tenant 'other'" in refused.value.message


def test_only_a_deferred_call_wakes_the_beats(tenant, django_capture_on_commit_callbacks):
    with mock.patch(PUBLISH), mock.patch("scheduler_app.services.jobs.wake_beats") as wake:
        with django_capture_on_commit_callbacks(execute=True):
            djtasks.add.enqueue(1, 1)
        assert not wake.called  # its fire is recorded: nothing for a beat to do
        djtasks.add.using(run_after=db_now() + timedelta(minutes=5)).enqueue(1, 1)
        assert wake.called
