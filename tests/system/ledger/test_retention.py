"""Retention in a running beat: old runs are pruned in the background while the beat keeps
dispatching (the rest of retention: tests/unit/ledger/test_retention.py,
tests/integration/ledger/test_retention.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState, db_now
from tests.conftest import wait_for
from tests.integration.ledger.test_retention import DAY, finished, left
from tests.unit.ledger.test_retention import policy  # noqa: F401 (an autouse fixture)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_running_beat_prunes_old_runs_in_the_background_and_keeps_dispatching(tenant, processes, queue_name):
    old_job = Job.objects.create(tenant=tenant, name="old", cron="0 0 1 1 *", task_name="scheduler_app.echo")
    now = db_now()
    JobRun.objects.bulk_create(
        JobRun(
            job=old_job,
            tenant=tenant,
            state=RunState.SUCCEEDED,
            scheduled_at=now - timedelta(days=400, minutes=n),
            created_at=now - 400 * DAY,
            finished_at=now - 400 * DAY,
        )
        for n in range(500)
    )
    young = finished(old_job, RunState.SUCCEEDED, 1, now=now)
    ticking = services.job_create(
        tenant, services.JobSpec(name="ticking", task_name="scheduler_app.echo", every=1, queue=queue_name)
    )

    processes.beat(
        "beat",
        "--max-sleep",
        "1",
        CRONFLEET_RETENTION_BATCH_SIZE="50",
        CRONFLEET_RETENTION_KEEP_LAST="0",
        CRONFLEET_RETENTION_DAYS="30",
    )

    wait_for(lambda: JobRun.objects.filter(job=old_job).count() == 1, timeout=60, what="the old runs pruned")
    wait_for(lambda: JobRun.objects.filter(job=ticking).count() >= 3, timeout=30, what="the ticking job's runs")
    assert left(young) == [True]
    assert "Traceback" not in processes.log("beat")
