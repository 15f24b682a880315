"""Manual runs (triggers, backfills) go through the tenant's manual budget: at most
CRONFLEET_MANUAL_RUNS_IN_FLIGHT of a tenant's manual runs are queued or running at once, the
rest wait as pending and the beat releases them in turn, so one tenant's backfill does not
bury another tenant's scheduled fires at the workers."""

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.dispatch.quotas import release_quota_held_runs
from scheduler_app.models import JobRun, RunState, Tenant, db_now
from tests.conftest import utc, wait_for

MANUAL_PREFIX = "quota_manual"  # the reason of a manual run waiting for its tenant's manual budget


def make_tenant(slug, **quota) -> Tenant:
    return Tenant.objects.create(slug=slug, name=slug, **quota)


def backfill(job, fires: int):
    """Backfill the `fires` latest past fires of an every-second job."""
    end = db_now().replace(microsecond=0) - timedelta(seconds=1)
    return services.job_backfill(job, start=end - timedelta(seconds=fires - 1), end=end, dry_run=False)


@pytest.fixture
def small_budget(settings):
    settings.CRONFLEET_MANUAL_RUNS_IN_FLIGHT = 3


def test_a_backfill_over_the_manual_budget_waits_as_pending(db, make_job, small_budget):
    job = make_job(tenant=make_tenant("flood"), cron="", every_seconds=1, next_run_at=utc(2100, 1, 1))

    answer = backfill(job, 10)

    runs = JobRun.objects.filter(job=job)
    assert (answer["created"], answer["held"]) == (10, 7)
    assert runs.filter(state=RunState.QUEUED).count() == 3
    held = runs.filter(state=RunState.PENDING)
    assert held.count() == 7 and all(run.reason.startswith(MANUAL_PREFIX) for run in held)
    assert all(run.dispatched_at is None for run in held)


def test_a_trigger_waits_behind_its_tenants_held_manual_runs_but_not_another_tenants(db, make_job, small_budget):
    flood = make_job(tenant=make_tenant("flood"), cron="", every_seconds=1, next_run_at=utc(2100, 1, 1))
    quiet = make_job(tenant=make_tenant("quiet"), cron="", every_seconds=1, next_run_at=utc(2100, 1, 1))
    backfill(flood, 5)

    waiting = services.job_trigger(flood)
    prompt = services.job_trigger(quiet)

    assert waiting.state == RunState.PENDING and waiting.reason.startswith(MANUAL_PREFIX)
    assert prompt.state == RunState.QUEUED and prompt.dispatched_at is not None


def test_the_beat_releases_held_manual_runs_as_the_tenants_own_finish(db, make_job, small_budget):
    job = make_job(tenant=make_tenant("flood"), cron="", every_seconds=1, next_run_at=utc(2100, 1, 1))
    backfill(job, 10)
    now = db_now()
    assert release_quota_held_runs(now, limit=100) == []  # three in flight: no room

    JobRun.objects.filter(job=job, state=RunState.QUEUED).update(state=RunState.SUCCEEDED, finished_at=now)
    released = release_quota_held_runs(now, limit=100)

    assert len(released) == 3
    assert JobRun.objects.filter(job=job, state=RunState.QUEUED).count() == 3
    assert JobRun.objects.filter(job=job, state=RunState.PENDING).count() == 4
    first_fires = sorted(JobRun.objects.filter(job=job).values_list("scheduled_at", flat=True))[3:6]
    assert sorted(JobRun.objects.filter(id__in=[m.run_id for m in released])
                  .values_list("scheduled_at", flat=True)) == first_fires  # oldest fire first


def test_held_manual_runs_of_a_queue_over_the_high_water_mark_stay_held(db, make_job, small_budget, queue_name):
    job = make_job(tenant=make_tenant("flood"), cron="", every_seconds=1, next_run_at=utc(2100, 1, 1),
                   queue=queue_name)
    backfill(job, 10)
    now = db_now()
    JobRun.objects.filter(job=job, state=RunState.QUEUED).update(state=RunState.SUCCEEDED, finished_at=now)

    assert release_quota_held_runs(now, limit=100, held_back=[queue_name]) == []
    assert len(release_quota_held_runs(now, limit=100)) == 3


# --- end to end: a real beat and a real worker ----------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_tenants_backfills_do_not_delay_another_tenants_fires(make_job, processes, queue_name):
    """Tenant "flood" backfills 4,000 runs of 20 ms and triggers 50 more on the shared queue;
    tenant "quiet" has an every-second job there, one worker with four processes. Sent at
    once, flood's runs put quiet's fires behind the whole backlog (up to 28 s late on the
    code before the manual budget). Within the budget (100 in flight) they wait behind at
    most 100 of flood's runs, and flood's backlog still drains."""
    concurrency, task_seconds = 4, 0.02
    processes.worker(queue_name, concurrency=concurrency)
    processes.beat("beat", "--max-sleep", "1")
    wait_for(lambda: "runbeat: started" in processes.log("beat"), timeout=30, what="the beat to start")
    flood, quiet = make_tenant("flood"), make_tenant("quiet")
    start = db_now().replace(microsecond=0) + timedelta(seconds=2)
    quiet_job = make_job(tenant=quiet, cron="", every_seconds=1, anchor_at=start, next_run_at=start, queue=queue_name)
    flood_jobs = [make_job(tenant=flood, cron="", every_seconds=1, next_run_at=utc(2100, 1, 1), queue=queue_name,
                           task_name="scheduler_app.sleep", kwargs={"seconds": task_seconds}) for _ in range(4)]

    for job in flood_jobs:
        backfill(job, 1000)
    for i in range(50):
        services.job_trigger(flood_jobs[i % 4])
    window_end = start + timedelta(seconds=15)
    quiet_runs = JobRun.objects.filter(job=quiet_job, scheduled_at__gte=start, scheduled_at__lte=window_end)
    wait_for(lambda: quiet_runs.count() == 16 and not quiet_runs.filter(started_at__isnull=True).exists(),
             timeout=90, what="quiet's 16 fires of the window to start")

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
