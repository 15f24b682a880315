"""The fair ranking on PostgreSQL (sql._FAIR_RANKING_PG) reads about as many rows as it
lists, never the whole due set, and what it lists is exactly the first rows of the full
fair order: each tenant's due jobs ranked by (priority desc, next_run_at, id), taken by
rank / weight, ties to the higher priority, then the older fire, then the lower id.
"""

import random
from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app import dispatch
from scheduler_app.dispatch import sql
from scheduler_app.models import Job, Tenant
from tests.conftest import rows_read, utc

T = utc(2024, 1, 1, 0, 0, 0)


def make_tenant(slug, weight=1) -> Tenant:
    return Tenant.objects.create(slug=slug, name=slug, weight=weight)


def ranked_ids(now, horizon, held_back=()) -> list[int]:
    clause, params = dispatch.claim.hold_back_clause("due", held_back)
    with connection.cursor() as cursor:
        cursor.execute(sql.FAIR_ORDER.format(held_back=clause), {"now": now, "horizon": horizon, **params})
        return [row[0] for row in cursor.fetchall()]


def full_order(now, held_back=()) -> tuple[list[int], dict[int, int], dict[int, int]]:
    """The fair order of every due job, computed here from the rows (the oracle); and the
    due count and weight of each tenant with a due job."""
    weights = dict(Tenant.objects.values_list("id", "weight"))
    due = sorted(
        (
            job
            for job in Job.objects.filter(enabled=True, next_run_at__lte=now)
            .exclude(queue__in=held_back)
            .values("id", "tenant_id", "priority", "next_run_at")
        ),
        key=lambda job: (job["tenant_id"], -job["priority"], job["next_run_at"], job["id"]),
    )
    ranks: dict[int, int] = {}
    keyed = []
    for job in due:
        ranks[job["tenant_id"]] = ranks.get(job["tenant_id"], 0) + 1
        share = ranks[job["tenant_id"]] / weights[job["tenant_id"]]
        keyed.append(((share, -job["priority"], job["next_run_at"], job["id"]), job["id"]))
    active_weights = {tenant_id: weights[tenant_id] for tenant_id in ranks}
    return [job_id for _, job_id in sorted(keyed)], ranks, active_weights


@pytest.mark.django_db(transaction=True)
def test_the_bounded_ranking_lists_exactly_the_first_rows_of_the_full_order():
    rng = random.Random(11)
    tenants = [
        make_tenant("heavy", 1),
        make_tenant("weighty", 3),
        make_tenant("light", 2),
        make_tenant("few", 1),
        make_tenant("idle", 5),
    ]
    jobs = []
    for tenant, count in zip(tenants, (400, 250, 120, 6, 0), strict=True):
        for i in range(count):
            jobs.append(
                Job(
                    tenant=tenant,
                    name=f"{tenant.slug}-{i}",
                    task_name="scheduler_app.echo",
                    cron="* * * * *",
                    # a few levels, many ties in next_run_at, some due later, some paused, some held back
                    priority=rng.choice([0, 5, 5, 5, 9]),
                    next_run_at=T - timedelta(seconds=rng.randrange(-30, 120, 10)),
                    enabled=rng.random() > 0.05,
                    queue="held" if rng.random() < 0.05 else "default",
                )
            )
    Job.objects.bulk_create(jobs)

    for held_back in ((), ("held",)):
        expected, due, weights = full_order(T, held_back)
        for horizon in (1, 2, 7, 50, 333, 700, 5000):
            listed = ranked_ids(T, horizon, held_back)
            assert listed == expected[: len(listed)], (held_back, horizon)
            # Each tenant is listed up to its share of the horizon (all of its due jobs when it
            # has fewer): the list is at least that long.
            total = sum(weights.values())
            least = min(horizon, sum(min(count, horizon * weights[t] // total) for t, count in due.items()))
            assert least <= len(listed) <= horizon, (held_back, horizon, len(listed))
        assert ranked_ids(T, 5000, held_back) == expected  # a horizon past the due set lists all of it


@pytest.mark.django_db(transaction=True)
def test_rows_past_a_tenants_quota_are_never_passed_over():
    """Quotas are ceil(horizon * weight / active weights): 12 * 3 / 10 gives the heavy tenant 4
    rows (shares up to 1.33) and 12 * 1 / 10 the light one 2 (up to 2); six tenants with one
    due job each leave room in the horizon. The light tenant's second job (share 2) must not
    be listed: the heavy tenant's fifth (share 1.67), not read, comes before it."""
    heavy, light = make_tenant("heavy", 3), make_tenant("light", 1)
    singles = [make_tenant(f"single-{i}") for i in range(6)]
    Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"{tenant.slug}-{i}",
            task_name="scheduler_app.echo",
            cron="* * * * *",
            next_run_at=T - timedelta(seconds=i),
        )
        for tenant, count in [(heavy, 10), (light, 10), *[(single, 1) for single in singles]]
        for i in range(count)
    )
    expected, _, _ = full_order(T)

    listed = ranked_ids(T, 12)

    assert listed == expected[:11]  # up to the heavy tenant's fourth (share 1.33); its fifth is next


@pytest.mark.django_db(transaction=True)
def test_the_ranking_reads_about_what_it_lists_not_the_whole_due_set():
    tenants = [make_tenant(f"t{i}") for i in range(3)]
    Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"{tenant.slug}-{i}",
            task_name="scheduler_app.echo",
            cron="* * * * *",
            priority=(5 if i % 2 else 7),
            next_run_at=T - timedelta(seconds=i % 97),
        )
        for tenant in tenants
        for i in range(2000)
    )
    Job.objects.bulk_create(  # not due: the ranking must not read these either
        Job(
            tenant=tenants[0],
            name=f"later-{i}",
            task_name="scheduler_app.echo",
            cron="* * * * *",
            priority=9,
            next_run_at=T + timedelta(hours=1),
        )
        for i in range(2000)
    )
    read, plan = rows_read(sql.FAIR_ORDER.format(held_back=""), {"now": T, "horizon": 90}, "scheduler_app_job")
    # 30 listed per tenant, at most 30 per level in use (two), plus one probe row per tenant:
    # 183 at most, against 6,000 due jobs and 2,000 later ones.
    assert 90 <= read <= 3 * (2 * 30 + 1), plan
    assert len(ranked_ids(T, 90)) == 90
