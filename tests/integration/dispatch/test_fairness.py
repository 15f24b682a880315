"""Fair claiming across tenants: one tenant's backlog must not delay another tenant's jobs.

Jobs are claimed in the order rank / tenant weight, where rank numbers each tenant's due
jobs by (priority descending, next_run_at, id); locked rows are skipped before the LIMIT counts.
Here against the real PostgreSQL; the embedded SQLite default, in a subprocess: the system
tier's test_fairness.
"""

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from scheduler_app import dispatch
from scheduler_app.models import Job, JobRun, Tenant
from tests.conftest import utc

GRACE = timedelta(seconds=60)
T = utc(2024, 1, 1, 0, 0, 0)


def make_tenant(slug, **fields) -> Tenant:
    return Tenant.objects.create(slug=slug, name=slug, **fields)


def seed(tenant, count, at=T) -> list[int]:
    """`count` due jobs of `tenant` in one statement; their ids in creation order."""
    jobs = Job.objects.bulk_create(
        Job(tenant=tenant, name=f"{tenant.slug}-{i}", task_name="scheduler_app.echo", cron="* * * * *", next_run_at=at)
        for i in range(count)
    )
    return [job.id for job in jobs]


def claim(now=T, limit=100) -> list[dict]:
    with transaction.atomic():
        return dispatch.claim.claim_due_jobs(now, limit=limit)


def shares(jobs, tenants) -> list[int]:
    counts = Counter(job["tenant_id"] for job in jobs)
    return [counts[tenant.id] for tenant in tenants]


def dispatch_turn(now=T, limit=100) -> list[int]:
    """Dispatch one batch (runs recorded, next fire times advanced); the ids of the jobs fired."""
    before = set(JobRun.objects.values_list("id", flat=True))
    dispatch.dispatch_due_jobs(now, limit=limit, grace=GRACE)
    return list(JobRun.objects.exclude(id__in=before).order_by("id").values_list("job_id", flat=True))


def test_a_small_tenant_is_not_stuck_behind_a_big_one(db):
    big, small = make_tenant("big"), make_tenant("small")
    seed(big, 5000)  # lower ids, the same instant
    small_ids = seed(small, 10)

    result = dispatch.dispatch_due_jobs(T, limit=100, grace=GRACE)

    assert result.claimed == 100
    assert sorted(JobRun.objects.filter(tenant=small).values_list("job_id", flat=True)) == small_ids
    assert JobRun.objects.filter(tenant=big).count() == 90


def test_weights_give_proportional_shares_turn_after_turn(db):
    heavy, light = make_tenant("heavy", weight=3), make_tenant("light", weight=1)
    seed(light, 400)
    seed(heavy, 400)

    turns = [dispatch_turn(limit=100) for _ in range(3)]  # the first ranks; the next two claim from one list

    tenant_of = dict(Job.objects.values_list("id", "tenant_id"))
    assert [shares([{"tenant_id": tenant_of[i]} for i in turn], [heavy, light]) for turn in turns] == [[75, 25]] * 3
    assert len({i for turn in turns for i in turn}) == 300


def test_equal_weights_interleave_and_each_tenant_goes_oldest_first(db):
    a, b, c = make_tenant("a"), make_tenant("b"), make_tenant("c")
    for tenant, offsets in ((a, [5, 1, 3]), (b, [4, 2]), (c, [6])):
        for seconds in offsets:
            Job.objects.create(
                tenant=tenant,
                name=f"{tenant.slug}-{seconds}",
                task_name="scheduler_app.echo",
                cron="* * * * *",
                next_run_at=T - timedelta(seconds=seconds),
            )

    jobs = claim(limit=10)

    ranked = [(job["tenant_id"], (T - job["next_run_at"]).seconds) for job in jobs]
    # rank 1 of each tenant (oldest fire first among equal shares), then rank 2, then rank 3
    assert ranked == [(c.id, 6), (a.id, 5), (b.id, 4), (a.id, 3), (b.id, 2), (a.id, 1)]


def test_a_claim_returns_every_field_as_the_orm_reads_it(make_job):
    job = make_job(cron="0 3 * * *", timezone="Europe/Berlin", next_run_at=T, queue="q", timeout_seconds=7)

    (claimed,) = claim(limit=5)

    assert claimed == dict(Job.objects.filter(id=job.id).values(*dispatch.claim.CLAIM_FIELDS).get())


@pytest.mark.django_db(transaction=True)
def test_two_beats_claiming_at_once_each_get_a_full_batch_of_different_jobs():
    tenants = [make_tenant(f"t{i}") for i in range(3)]
    for tenant in tenants:
        seed(tenant, 100)
    first_claimed = threading.Event()
    second_done = threading.Event()
    claims: dict[str, list[int]] = {}
    errors = []

    def first_beat():
        try:
            with transaction.atomic():
                claims["first"] = [job["id"] for job in dispatch.claim.claim_due_jobs(T, limit=100)]
                first_claimed.set()
                second_done.wait(timeout=30)  # keep the rows locked while the other beat claims
        except Exception as exc:
            errors.append(exc)
        finally:
            first_claimed.set()
            connection.close()

    thread = threading.Thread(target=first_beat)
    thread.start()
    try:
        assert first_claimed.wait(timeout=30)
        claims["second"] = [job["id"] for job in claim(limit=100)]  # the same ranking, the same first 100
    finally:
        second_done.set()
        thread.join(timeout=30)

    assert not errors, errors
    assert len(claims["first"]) == len(claims["second"]) == 100  # LIMIT counts after skipping locked rows
    assert not set(claims["first"]) & set(claims["second"])


@pytest.mark.django_db(transaction=True)
def test_a_job_changed_after_the_claim_began_is_not_claimed():
    """The due test is checked again on the row version the lock finds (EvalPlanQual)."""
    tenant = make_tenant("t")
    paused, advanced, due = seed(tenant, 3)
    other = connections.create_connection("default")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            statement = dispatch.claim.fair_claim_sql()
            cursor.execute(f"DECLARE claim CURSOR FOR {statement}", {"now": T, "limit": 10})  # snapshot: all due
            with other.cursor() as change:  # another session pauses one job and advances another
                change.execute("UPDATE scheduler_app_job SET enabled = false WHERE id = %s", [paused])
                change.execute(
                    "UPDATE scheduler_app_job SET next_run_at = %s WHERE id = %s", [T + timedelta(hours=1), advanced]
                )
            cursor.execute("FETCH ALL FROM claim")
            claimed = [row[0] for row in cursor.fetchall()]
    finally:
        other.close()

    assert claimed == [due]


@pytest.mark.django_db(transaction=True)
def test_a_backlog_is_claimed_from_one_ranking_for_at_most_its_lifetime():
    big = make_tenant("big")
    big_ids = seed(big, 500)
    lifetime = timedelta(seconds=dispatch.claim.FAIR_ORDER_SECONDS)

    assert dispatch_turn(T, limit=10) == big_ids[:10]  # a full batch: there is a backlog
    assert dispatch_turn(T, limit=10) == big_ids[10:20]  # ranks the backlog once, claims from the list
    newcomer = seed(make_tenant("newcomer"), 1, at=T)[0]  # falls due after the ranking
    during = dispatch_turn(T + lifetime / 2, limit=10)
    after = dispatch_turn(T + lifetime, limit=10)

    assert during == big_ids[20:30]  # the list was ranked before the newcomer was due
    assert after[:2] == [big_ids[30], newcomer]  # ranked again: rank 1 of its tenant, after big's rank 1


@pytest.mark.django_db(transaction=True)
def test_claims_from_a_ranking_skip_jobs_another_beat_holds():
    tenant = make_tenant("t")
    ids = seed(tenant, 60)
    assert dispatch_turn(T, limit=10) == ids[:10]  # a backlog: the next claim ranks once and lists
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM scheduler_app_job WHERE id = ANY(%s) FOR UPDATE", [ids[10:15]])
            second = [job["id"] for job in claim(T, limit=10)]
            cursor.execute("ROLLBACK")
    finally:
        other.close()

    assert second == ids[15:25]


@pytest.mark.django_db(transaction=True)
def test_a_claim_locks_its_batch_and_nothing_more():
    ids = seed(make_tenant("a"), 30) + seed(make_tenant("b"), 20)
    other = connections.create_connection("default")
    try:
        with transaction.atomic():
            claimed = claim(T, limit=10)
            with other.cursor() as cursor:
                cursor.execute("SELECT id FROM scheduler_app_job WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED", [ids])
                free = {row[0] for row in cursor.fetchall()}
    finally:
        other.close()

    assert set(ids) - free == {job["id"] for job in claimed} and len(claimed) == 10


@pytest.mark.django_db(transaction=True)
def test_the_claim_walks_the_ranking_by_primary_key_even_when_statistics_say_nothing_is_due():
    """Statistics gathered before a spike (every job due in the future) must not turn the
    claim into a scan of the due range per ranked job (quadratic in the spike)."""
    ids = seed(make_tenant("a"), 2000, at=utc(2999, 1, 1))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_job")
    Job.objects.filter(id__in=ids).update(next_run_at=T)

    with connection.cursor() as cursor:
        for statement, params in [
            (dispatch.claim.fair_claim_sql(), {"now": T, "limit": 100}),
            (dispatch.claim.claim_listed_sql(), {"now": T, "limit": 100, "ids": ids[:200]}),
        ]:
            cursor.execute(f"EXPLAIN {statement}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Index Cond: (id = " in plan and "scheduler_app_job_pkey" in plan, plan
            assert "Join Filter" not in plan and "Hash Join" not in plan.split("Subquery Scan on job")[-1], plan
