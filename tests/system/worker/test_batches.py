"""Batched runs with real beats and workers: each run of a batch keeps its row, and a worker
killed mid-batch costs one lease, every run ending once."""

import signal

import pytest

from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from tests.conftest import wait_for


def one_offs(tenant, count, at, **fields):
    return Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"b{i}",
            task_name="scheduler_app.echo",
            run_at=at,
            next_run_at=at,
            batch=True,
            timeout_seconds=10,
            **fields,
        )
        for i in range(count)
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_batches_and_each_run_keeps_its_row(processes, queue_name):
    tenant = Tenant.objects.create(slug="batched", name="batched")
    jobs = one_offs(tenant, 300, db_now(), queue=queue_name)
    processes.worker(queue_name, concurrency=2)
    processes.beat("beat", "--max-sleep", "1", CRONFLEET_RUN_BATCH_SIZE="50")

    wait_for(
        lambda: JobRun.objects.filter(state=RunState.SUCCEEDED).count() == 300,
        timeout=60,
        what="all 300 batched runs to succeed",
    )

    runs = JobRun.objects.filter(job__in=jobs)
    assert runs.count() == 300 and {len(run.attempts) for run in runs} == {1}
    assert sum(run.duplicate_deliveries for run in runs) == 0
    batches = {run.celery_task_id for run in runs}
    assert all("-batch-" in task_id for task_id in batches) and len(batches) <= 300 // 50 + 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_batch_costs_one_lease_and_every_run_ends_once(processes, queue_name):
    """Twenty runs of 0.3 s in one batch; the worker is killed after some have finished. The
    finished ones were written (every FLUSH_SECONDS) and stay attempt 1; the rest are lost
    after one lease, retried by a new worker, and succeed as attempt 2."""
    tenant = Tenant.objects.create(slug="killed", name="killed")
    jobs = Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"k{i}",
            task_name="scheduler_app.sleep",
            kwargs={"seconds": 0.3},
            run_at=db_now(),
            next_run_at=db_now(),
            batch=True,
            timeout_seconds=10,
            queue=queue_name,
        )
        for i in range(20)
    )
    fast = {"CRONFLEET_LEASE_SECONDS": "4", "CRONFLEET_HEARTBEAT_SECONDS": "1"}
    worker = processes.worker(queue_name, concurrency=1, **fast)
    processes.beat("beat", "--max-sleep", "1", CRONFLEET_RUN_BATCH_SIZE="20", **fast)
    wait_for(
        lambda: JobRun.objects.filter(job__in=jobs, state=RunState.SUCCEEDED).count() >= 4,
        timeout=60,
        what="a few runs of the batch to be written",
    )
    processes.stop(worker, signal.SIGKILL)
    done_before = set(JobRun.objects.filter(job__in=jobs, state=RunState.SUCCEEDED).values_list("id", flat=True))

    processes.worker(queue_name, name="worker2", concurrency=1, **fast)
    wait_for(
        lambda: JobRun.objects.filter(job__in=jobs, state=RunState.SUCCEEDED).count() == 20,
        timeout=90,
        what="every run to succeed after the lease ran out",
    )

    runs = list(JobRun.objects.filter(job__in=jobs))
    assert 4 <= len(done_before) < 20
    assert all(run.attempt == 1 for run in runs if run.id in done_before)
    assert all(
        run.attempt == 2 and [a["outcome"] for a in run.attempts] == ["lost", "succeeded"]
        for run in runs
        if run.id not in done_before
    )
