"""Stats over wide windows through the hourly rollup (scheduler_app/ledger/rollup.py): the same
counts as the ledger, lag percentiles within the histograms' stated precision, the open
edges read live, and history that outlives pruning."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app.ledger import rollup, stats
from scheduler_app.models import Job, JobRun, RunHour, RunState, Trigger, db_now
from tests.integration.api.test_api import client_for, make_tenant

DAY = timedelta(days=1)


def job_of(tenant, name: str = "j") -> Job:
    return Job.objects.create(tenant=tenant, name=name, cron="* * * * *", task_name="scheduler_app.echo")


def run_at(
    job: Job,
    at,
    *,
    state: str = RunState.SUCCEEDED,
    start_lag: float | None = 1.0,
    dispatch_lag: float = 0.05,
    trigger: str = Trigger.SCHEDULE,
) -> JobRun:
    started = at + timedelta(seconds=start_lag) if start_lag is not None else None
    return JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=at,
        created_at=at,
        state=state,
        trigger=trigger,
        dispatched_at=at + timedelta(seconds=dispatch_lag),
        enqueued_at=at + timedelta(seconds=dispatch_lag),
        started_at=started,
        finished_at=started + timedelta(seconds=1) if started else None,
    )


def nearest_rank(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def test_the_buckets_in_sql_are_the_buckets_in_python(db):
    lags = [-3.0, 0.0, 0.0009, 0.001, 0.0011, 0.05, 0.2, 1.0, 1.5, 59.9, 3600.0, 86400.0, 7 * 86400.0, 10**7]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(rollup.bucket_sql(f"{lag}::float8") for lag in lags))
        in_sql = list(cursor.fetchone())

    assert in_sql == [rollup.bucket_of(lag) for lag in lags]
    for lag in lags[3:-1]:  # inside [1 ms, 8 days): the bucket's value is within the stated precision
        assert abs(rollup.bucket_value(rollup.bucket_of(lag)) / lag - 1) <= rollup.PRECISION + 1e-9


def test_a_wide_window_counts_what_the_ledger_holds_and_its_lags_within_the_precision(db):
    a, b = make_tenant(), make_tenant()
    now = db_now()
    job, other = job_of(a), job_of(b)
    start_lags = []
    for i in range(60):  # one run every 20 minutes over 20 hours, lags from 0.1 s to about 60 s
        lag = 0.1 * 1.11**i
        state = RunState.DEAD if i % 10 == 0 else RunState.SUCCEEDED
        run_at(job, now - timedelta(minutes=20 * i + 7), state=state, start_lag=lag)
        start_lags.append(lag)
    run_at(job, now - timedelta(hours=3, minutes=1), state=RunState.SKIPPED, start_lag=None)
    run_at(job, now - timedelta(hours=5, minutes=2), trigger=Trigger.MANUAL, start_lag=900)  # counted, no lag
    run_at(other, now - timedelta(hours=2), state=RunState.FAILED)
    RunHour.objects.all().delete()  # the count starts from an empty rollup, whatever earlier tests committed
    assert rollup.roll_up(now, max_hours=500) > 8 * 24 - 3

    wide = stats.run_stats(a.id, window=DAY, now=now)

    assert wide["counts"]["succeeded"] == 55 and wide["counts"]["dead"] == 6 and wide["counts"]["skipped"] == 1
    assert wide["total"] == 62 and wide["failure_rate"] == pytest.approx(6 / 61)
    assert wide["start_lag_seconds"]["count"] == 60 and wide["dispatch_lag_seconds"]["count"] == 61
    for p in (50, 95, 99):
        exact = nearest_rank(start_lags, p / 100)
        assert wide["start_lag_seconds"][f"p{p}"] == pytest.approx(exact, rel=rollup.PRECISION)
    assert wide["dispatch_lag_seconds"]["p99"] == pytest.approx(0.05, rel=rollup.PRECISION)
    everyone = stats.run_stats(None, window=DAY, now=now)
    assert (everyone["total"], everyone["counts"]["failed"]) == (63, 1)
    assert client_for(a).get("/api/v1/stats/?window=86400").json()["total"] == 62


def test_the_open_edges_are_read_live_and_rolled_hours_keep_their_counts_after_pruning(db):
    tenant = make_tenant()
    job = job_of(tenant)
    now = db_now()
    old = [run_at(job, now - timedelta(hours=h, minutes=30)) for h in range(2, 8)]
    rollup.roll_up(now, max_hours=500)
    # After the roll-up: one run in the hour still open, one at the window's oldest edge.
    run_at(job, now - timedelta(minutes=2), state=RunState.FAILED)
    since = now - DAY
    run_at(job, since + (rollup.floor_hour(since) + rollup.HOUR - since) / 2, state=RunState.FAILED)
    JobRun.objects.filter(id__in=[run.id for run in old]).delete()  # pruned: the rollup remembers them

    wide = stats.run_stats(tenant.id, window=DAY, now=now)

    assert (wide["counts"]["succeeded"], wide["counts"]["failed"], wide["total"]) == (6, 2, 8)
    assert RunHour.objects.filter(tenant_id=tenant.id).count() == 6


def test_rolling_up_twice_or_in_two_beats_adds_each_hour_once(db):
    tenant = make_tenant()
    job = job_of(tenant)
    now = db_now()
    run_at(job, now - timedelta(hours=3))
    RunHour.objects.all().delete()  # the count starts from an empty rollup, whatever earlier tests committed
    first = rollup.roll_up(now, max_hours=500)
    RunHour.objects.filter(hour__gte=rollup.floor_hour(now - timedelta(hours=4))).delete()
    rollup.roll_up(now, max_hours=500)  # the last marker is older now: the deleted hours again
    again = rollup.roll_up(now, max_hours=500)

    assert first in (8 * 24 - 2, 8 * 24 - 1)  # every hour of KEEP that ended SETTLE ago
    assert again == 0
    assert RunHour.objects.filter(tenant_id=tenant.id).count() == 1
    assert stats.run_stats(tenant.id, window=DAY, now=now)["total"] == 1


def test_short_windows_stay_exact(db):
    tenant = make_tenant()
    job = job_of(tenant)
    now = db_now()
    run_at(job, now - timedelta(minutes=30), start_lag=1.234)

    exact = stats.run_stats(tenant.id, window=timedelta(hours=1), now=now)

    assert exact["start_lag_seconds"]["p50"] == pytest.approx(1.234)
