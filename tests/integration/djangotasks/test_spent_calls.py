"""Spent django.tasks calls leave nothing behind (ledger/spentcalls.py): once retention has
pruned a call's run, the retention pass deletes the call's one-off job and its audit; a call
still waiting, a call whose run is kept, a periodic task's job and a job made by hand are left
alone, and a job another connection holds is passed over. On the real database."""

from __future__ import annotations

import threading
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connections, transaction

from scheduler_app import services, taskapi
from scheduler_app.ledger import retention, spentcalls
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Tenant, db_now

if taskapi.api is None:
    pytest.skip("neither django.tasks nor the django-tasks backport is installed", allow_module_level=True)

from tests.support import djtasks  # noqa: E402 - defines tasks: only with the task API present

PUBLISH = "scheduler_app.services.taskcalls.publish_runs"


@pytest.fixture
def tenant(db) -> Tenant:
    return Tenant.objects.create(slug="djtasks", name="django.tasks")


def call(*args, run_after=None) -> Job:
    task = djtasks.add if run_after is None else djtasks.add.using(run_after=run_after)
    with mock.patch(PUBLISH):
        return Job.objects.get(id=int(task.enqueue(*args).id))


def finish_and_prune_runs(job: Job) -> None:
    """The run ended long ago and retention took it (as the run walk would)."""
    JobRun.objects.filter(job=job).update(state=RunState.SUCCEEDED, finished_at=db_now() - timedelta(days=90))
    JobRun.objects.filter(job=job).delete()


def test_a_call_whose_run_retention_took_goes_with_its_audit_and_nothing_else_does(tenant):
    spent = call(1, 2)
    kept = call(3, 4)  # its run is still there (not yet past retention)
    waiting = call(5, 6, run_after=db_now() + timedelta(hours=1))
    by_hand = services.job_create(
        tenant, services.JobSpec(name="by-hand", task_name="scheduler_app.echo", at=db_now() + timedelta(hours=1))
    )
    Job.objects.filter(id=by_hand.id).update(next_run_at=None)  # fired, its run gone: not a call
    finish_and_prune_runs(spent)
    assert AuditEvent.objects.filter(job=spent).exists()

    assert list(spentcalls.spent_calls().values_list("id", flat=True)) == [spent.id]
    assert spentcalls.prune_spent_calls(100, dry_run=True) == 1 and Job.objects.filter(id=spent.id).exists()
    assert spentcalls.prune_spent_calls(100) == 1

    assert not Job.objects.filter(id=spent.id).exists()
    assert not AuditEvent.objects.filter(job_id=spent.id).exists()
    assert set(Job.objects.values_list("id", flat=True)) == {kept.id, waiting.id, by_hand.id}


def test_the_retention_pass_prunes_spent_calls_with_its_audit_batch(tenant):
    spent = [call(n, n) for n in range(3)]
    for job in spent:
        finish_and_prune_runs(job)

    pruner = retention.Pruner(batch_size=2)
    pruner.prune_audit(db_now())
    assert pruner.progress.calls_pruned == 2  # a bounded batch
    assert pruner.audit_at <= pruner.clock()  # a full batch: due again at once
    pruner.prune_audit(db_now())

    assert pruner.progress.calls_pruned == 3
    assert not Job.objects.filter(id__in=[job.id for job in spent]).exists()


@pytest.mark.django_db(transaction=True)  # the holder's lock is seen from the pruner's own connection
def test_a_spent_call_another_connection_holds_is_passed_over():
    Tenant.objects.create(slug="djtasks", name="django.tasks")
    held, free = call(1, 1), call(2, 2)
    for job in (held, free):
        finish_and_prune_runs(job)
    locked, release, pruned = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(id=held.id)
                locked.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(timeout=30)
        pruned.append(spentcalls.prune_spent_calls(100))
    finally:
        release.set()
        holder.join(timeout=30)

    assert pruned == [1]
    assert list(Job.objects.values_list("id", flat=True)) == [held.id]
