"""A real worker across a PostgreSQL restart (issue 40, item 7/5): the connection it kept
from its last delivery was closed by the server, and its next batch (or single run) must
start on a new one, not fail on the old one.

The restart is of a PostgreSQL cluster of the test's own (tests/support/servers/), never the
machine's shared one. Needs PostgreSQL's server programs; skipped otherwise.
"""

import pytest
from django.db import connection

from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
RUNS = 10


def echoes_due_now(tenant, name: str, *, queue: str, batch: bool) -> list[Job]:
    now = db_now()
    return Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"{name}{i}",
            task_name="scheduler_app.echo",
            run_at=now,
            next_run_at=now,
            batch=batch,
            timeout_seconds=10,
            queue=queue,
        )
        for i in range(RUNS)
    )


def succeeded(jobs: list[Job]) -> bool:
    return JobRun.objects.filter(job__in=jobs, state=RunState.SUCCEEDED).count() == len(jobs)


@pytest.mark.parametrize("batch", [True, False], ids=["batches", "single-runs"])
def test_after_a_postgresql_restart_a_worker_starts_its_next_runs_on_a_new_connection(
    private_database, processes, queue_name, batch
):
    """One pool process, so the runs after the restart go to the process that kept its
    connection from the runs before. Each must be started by its first delivery: a start
    on the dead connection failed the whole delivery (DatabaseUnreachable, a batch's every
    run), and its runs waited for a beat to publish them again (enqueued_at moved past
    dispatched_at), though they still succeeded as attempt 1."""
    tenant = Tenant.objects.create(slug="restarted", name="restarted")
    before = echoes_due_now(tenant, "before", queue=queue_name, batch=batch)
    processes.worker(queue_name, concurrency=1)
    processes.beat("beat", "--max-sleep", "1", CRONFLEET_RUN_BATCH_SIZE=str(RUNS))
    wait_for(lambda: succeeded(before), timeout=60, what="the runs before the restart to succeed")

    private_database.restart_immediately()
    connection.close()  # this process's own connection died with the server
    after = echoes_due_now(tenant, "after", queue=queue_name, batch=batch)
    wait_for(lambda: succeeded(after), timeout=90, what="the runs after the restart to succeed")

    runs = list(JobRun.objects.filter(job__in=after).order_by("id"))
    assert [(run.attempt, [a["outcome"] for a in run.attempts]) for run in runs] == [(1, ["succeeded"])] * RUNS
    assert [run.id for run in runs if run.enqueued_at != run.dispatched_at] == [], "published again"
    assert all(("-batch-" in run.celery_task_id) == batch for run in runs)
    assert "database unreachable" not in processes.log("worker")
