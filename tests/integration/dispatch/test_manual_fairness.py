"""Manual runs (triggers, backfills) go through the tenant's manual budget: at most
CRONFLEET_MANUAL_RUNS_IN_FLIGHT of a tenant's manual runs are queued or running at once, the
rest wait as pending and the beat releases them in turn, so one tenant's backfill does not
bury another tenant's scheduled fires at the workers (end to end with a real beat and
worker: the system tier's test_manual_fairness)."""

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.dispatch.quotas import release_quota_held_runs
from scheduler_app.models import JobRun, RunState, Tenant, db_now
from tests.conftest import utc

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
    assert (
        sorted(JobRun.objects.filter(id__in=[m.run_id for m in released]).values_list("scheduled_at", flat=True))
        == first_fires
    )  # oldest fire first


def test_held_manual_runs_of_a_queue_over_the_high_water_mark_stay_held(db, make_job, small_budget, queue_name):
    job = make_job(tenant=make_tenant("flood"), cron="", every_seconds=1, next_run_at=utc(2100, 1, 1), queue=queue_name)
    backfill(job, 10)
    now = db_now()
    JobRun.objects.filter(job=job, state=RunState.QUEUED).update(state=RunState.SUCCEEDED, finished_at=now)

    assert release_quota_held_runs(now, limit=100, held_back=[queue_name]) == []
    assert len(release_quota_held_runs(now, limit=100)) == 3
