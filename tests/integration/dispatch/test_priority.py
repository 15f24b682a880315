"""Job priority (0-9, higher first) at each place runs wait, against the real PostgreSQL and
Redis: the claim of a tenant's due jobs, a tenant's quota, and the broker queue (real
workers on Redis and RabbitMQ: the system tier's test_priority).

Priority orders a tenant's own work; it never buys a larger share of a claim than the
tenant's weight gives.
"""

from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app import dispatch, services
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import PRIORITY_DEFAULT, AuditEvent, Job, JobRun, RunState, Tenant
from tests.conftest import take_broker_messages
from tests.unit.dispatch.test_priority import T

GRACE = timedelta(seconds=60)


# Ten jobs, none in priority order by id or by name.
PRIORITIES = [0, 9, 3, 7, 5, 1, 8, 2, 6, 4]


def seed(tenant, priorities, at=T, prefix="job", **fields) -> dict[int, int]:
    """One job due at `at` per priority (cron every minute unless `fields` say otherwise);
    {job id: priority}."""
    fields.setdefault("cron", "* * * * *")
    jobs = Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"{prefix}-{i}",
            task_name="scheduler_app.echo",
            next_run_at=at,
            priority=priority,
            **fields,
        )
        for i, priority in enumerate(priorities)
    )
    return {job.id: job.priority for job in jobs}


def fired_priorities(turn_limit, tenant=None) -> list[int]:
    """Dispatch one batch; the priorities of the jobs it fired, in claim order."""
    before = set(JobRun.objects.values_list("id", flat=True))
    dispatch.dispatch_due_jobs(T, limit=turn_limit, grace=GRACE)
    runs = JobRun.objects.exclude(id__in=before).order_by("id").select_related("job")
    return [run.job.priority for run in runs if tenant is None or run.tenant_id == tenant.id]


# --- the API of the field ---------------------------------------------------------------


def test_a_new_job_has_the_middle_priority_and_keeps_the_one_given(tenant):
    plain = services.job_create(tenant, services.JobSpec(name="plain", task_name="scheduler_app.echo", every=60))
    urgent = services.job_create(
        tenant, services.JobSpec(name="urgent", task_name="scheduler_app.echo", every=60, priority=9)
    )

    assert (plain.priority, urgent.priority) == (PRIORITY_DEFAULT, 9) == (5, 9)


@pytest.mark.parametrize("value", [-1, 10, 255, "9", 9.0, True, None])
def test_a_priority_outside_0_to_9_is_refused_by_name(tenant, value):
    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(
            tenant, services.JobSpec(name="x", task_name="scheduler_app.echo", every=60, priority=value)
        )

    assert caught.value.field == "priority"
    assert not Job.objects.exists()


def test_an_edit_of_the_priority_is_audited_and_leaves_the_schedule(tenant):
    job = services.job_create(tenant, services.JobSpec(name="j", task_name="scheduler_app.echo", every=60))
    next_run_at = job.next_run_at

    services.job_update(job, {"priority": 2}, actor="test")

    job.refresh_from_db()
    assert (job.priority, job.version, job.next_run_at) == (2, 2, next_run_at)
    assert AuditEvent.objects.get(job_id=job.id, action="job.updated").detail["changes"] == {"priority": [5, 2]}


# --- the claim ----------------------------------------------------------------------------


def test_a_tenants_higher_priority_jobs_are_claimed_first(db):
    tenant = Tenant.objects.create(slug="solo", name="solo")
    seed(tenant, PRIORITIES)

    # Three batches of four: the first ranks the due set, the next ones claim from that
    # ranking (dispatch.claim.FairOrder), and all follow priority.
    batches = [fired_priorities(4) for _ in range(3)]

    assert batches == [[9, 8, 7, 6], [5, 4, 3, 2], [1, 0]]


def test_equal_priorities_go_oldest_fire_first(db):
    tenant = Tenant.objects.create(slug="solo", name="solo")
    old = seed(tenant, [5, 5], at=T - timedelta(seconds=30), prefix="old", cron="30 * * * *")  # one fire due
    seed(tenant, [5, 9], prefix="new")

    fired = fired_priorities(3)

    first_jobs = list(JobRun.objects.order_by("id").values_list("job_id", flat=True))
    assert fired == [9, 5, 5]
    assert set(first_jobs[1:]) == set(old)


def test_priority_does_not_buy_a_larger_share_of_a_claim(db):
    urgent, calm = (Tenant.objects.create(slug=slug, name=slug) for slug in ("urgent", "calm"))
    seed(urgent, [9] * 50)
    seed(calm, [0] * 50)  # the same instant and weight

    dispatch.dispatch_due_jobs(T, limit=20, grace=GRACE)

    assert JobRun.objects.filter(tenant=urgent).count() == JobRun.objects.filter(tenant=calm).count() == 10


# --- the quota ----------------------------------------------------------------------------


def test_every_run_keeps_its_jobs_priority(tenant, monkeypatch):
    monkeypatch.setattr(dispatch.turn, "publish_runs", lambda messages: len(list(messages)))
    job = services.job_create(
        tenant, services.JobSpec(name="j", task_name="scheduler_app.echo", cron="0 * * * *", priority=8)
    )
    Job.objects.filter(id=job.id).update(next_run_at=T)

    dispatch.dispatch_due_jobs(T, limit=10, grace=GRACE)
    services.job_trigger(job)
    services.job_backfill(job, start=T - timedelta(hours=3), end=T - timedelta(seconds=1), dry_run=False)

    runs = JobRun.objects.filter(job=job)
    assert sorted(runs.values_list("trigger", flat=True)) == ["backfill", "backfill", "backfill", "manual", "schedule"]
    assert set(runs.values_list("priority", flat=True)) == {8}


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "statistics-of-an-empty-ledger"])
def test_the_quota_budget_goes_to_the_higher_priority_first(db, monkeypatch, analyzed):
    """With the ledger's statistics taken while it was empty, PostgreSQL planned the release's
    `id IN (sub-select ... LIMIT ... SKIP LOCKED)` as a sub-select run again per row, which
    passed over the runs it had just queued and queued all seven held runs in one go."""
    monkeypatch.setattr(dispatch.turn, "publish_runs", lambda messages: len(list(messages)))
    if analyzed:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE scheduler_app_jobrun")
    tenant = Tenant.objects.create(slug="capped", name="capped", max_fires_per_minute=3)
    seed(tenant, PRIORITIES, cron="", run_at=T)  # one-offs: each fires once

    dispatch.run_turn(T, batch_size=100, grace=GRACE, sweep=False)

    def out_now():
        return sorted(JobRun.objects.filter(state=RunState.QUEUED).values_list("job__priority", flat=True))

    assert out_now() == [7, 8, 9]
    assert JobRun.objects.filter(state=RunState.PENDING, reason__startswith="quota_").count() == 7

    # Each new minute releases the next three held runs, by priority (release_quota_held_runs).
    dispatch.run_turn(T + timedelta(seconds=61), batch_size=100, grace=GRACE, sweep=False)
    assert out_now() == [4, 5, 6, 7, 8, 9]
    dispatch.run_turn(T + timedelta(seconds=122), batch_size=100, grace=GRACE, sweep=False)
    assert out_now() == [1, 2, 3, 4, 5, 6, 7, 8, 9]


# --- the broker ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_published_messages_wait_in_redis_by_priority(queue_name):
    published = [RunMessage(run_id, 1, queue_name, 60, priority) for run_id, priority in enumerate(PRIORITIES)]

    publish_runs(published[:5])
    publish_runs(published[5:])

    taken = take_broker_messages(queue_name)
    assert [message["args"][0] for message in taken] == [1, 6, 3, 8, 4, 9, 2, 7, 5, 0]  # by priority 9..0
    assert [message["properties"]["priority"] for message in taken] == list(range(10))
