"""Manual runs go through the tenant's manual budget, end to end with a real beat and a real
worker: one tenant's backfill does not delay another tenant's scheduled fires at the workers."""

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, RunState, db_now
from tests.conftest import utc, wait_for
from tests.integration.dispatch.test_manual_fairness import backfill, make_tenant


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_tenants_backfills_do_not_delay_another_tenants_fires(make_job, processes, queue_name, settings):
    """Tenant "flood" backfills 4,000 runs of 20 ms and triggers 50 more on the shared queue;
    tenant "quiet" has an every-second job there, one worker with four processes. Sent at
    once, flood's runs put quiet's fires behind the whole backlog (up to 28 s late on the
    code before the manual budget). Within the budget (100 in flight) they wait behind at
    most 100 of flood's runs, and flood's backlog still drains."""
    concurrency, task_seconds = 4, 0.02
    # 4,050 manual runs in the hour, over the default bound on them: this is about the manual
    # budget's fairness, not that bound (tests/integration/services/test_tenant_bounds.py).
    settings.CRONFLEET_MANUAL_RUNS_PER_HOUR = 0
    processes.worker(queue_name, concurrency=concurrency)
    processes.beat("beat", "--max-sleep", "1")
    wait_for(lambda: "runbeat: started" in processes.log("beat"), timeout=30, what="the beat to start")
    flood, quiet = make_tenant("flood"), make_tenant("quiet")
    start = db_now().replace(microsecond=0) + timedelta(seconds=2)
    quiet_job = make_job(tenant=quiet, cron="", every_seconds=1, anchor_at=start, next_run_at=start, queue=queue_name)
    flood_jobs = [
        make_job(
            tenant=flood,
            cron="",
            every_seconds=1,
            next_run_at=utc(2100, 1, 1),
            queue=queue_name,
            task_name="scheduler_app.sleep",
            kwargs={"seconds": task_seconds},
        )
        for _ in range(4)
    ]

    for job in flood_jobs:
        backfill(job, 1000)
    for i in range(50):
        services.job_trigger(flood_jobs[i % 4])
    window_end = start + timedelta(seconds=15)
    quiet_runs = JobRun.objects.filter(job=quiet_job, scheduled_at__gte=start, scheduled_at__lte=window_end)
    wait_for(
        lambda: quiet_runs.count() == 16 and not quiet_runs.filter(started_at__isnull=True).exists(),
        timeout=90,
        what="quiet's 16 fires of the window to start",
    )

    lags = [(run.started_at - run.scheduled_at).total_seconds() for run in quiet_runs]
    print(f"quiet's start lag: max {max(lags):.2f} s")
    assert quiet_runs.exclude(state__in=[RunState.RUNNING, RunState.SUCCEEDED]).count() == 0  # none skipped
    flood_runs = JobRun.objects.filter(tenant=flood)
    assert flood_runs.count() == 4050
    # Behind the whole backlog quiet's fires would wait for it to drain, which takes at least
    # its runs' sleep spread over the worker's processes (longer on a loaded machine, never less).
    drain_at_least = flood_runs.count() * task_seconds / concurrency
    assert max(lags) < drain_at_least / 2, sorted(lags)
    assert flood_runs.filter(state=RunState.SUCCEEDED).count() > 100  # the beat released held ones meanwhile
