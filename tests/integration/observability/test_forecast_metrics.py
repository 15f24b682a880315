"""The autoscaling forecast (observability/forecast.py, docs/autoscaling.md): fires due per
queue in the next 1, 5 and 15 minutes as the beat plans them (a calendar's skipped fire left
out, an overdue job due now), the work they bring from each job's recent median duration,
the recommended workers by the documented formula, its series on /metrics. The plain script
(deploy/autoscale.py) reading them: tests/system/observability/test_forecast_metrics.py."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError
from prometheus_client.parser import text_string_to_metric_families

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState
from scheduler_app.observability import cluster, forecast, metrics
from scheduler_app.queues import queue_name
from tests.unit.observability.test_forecast_metrics import NOW

# A holiday of the tenant's calendar: the Tuesday after NOW, a Monday evening.
HOLIDAY = "2031-03-04"
LAG, CONCURRENCY, DEFAULT = 30.0, 1, 3.0


@pytest.fixture
def forecast_settings(settings):
    settings.CRONFLEET_FORECAST_TARGET_LAG_SECONDS = LAG
    settings.CRONFLEET_FORECAST_WORKER_CONCURRENCY = CONCURRENCY
    settings.CRONFLEET_FORECAST_DEFAULT_SECONDS = DEFAULT
    settings.CRONFLEET_FORECAST_CACHE_SECONDS = 0
    return settings


def job(
    tenant,
    name: str,
    next_run_at: datetime,
    *,
    queue: str = "",
    cron: str = "",
    every: int | None = None,
    calendar: str = "",
) -> Job:
    spec = services.JobSpec(
        name=name,
        task_name="scheduler_app.echo",
        cron=cron,
        every=every,
        timezone="UTC",
        queue=queue,
        calendar=calendar,
        calendar_policy="skip",
    )
    made = services.job_create(tenant, spec)
    Job.objects.filter(id=made.id).update(next_run_at=next_run_at)
    return made


def runs(made: Job, *durations: float | None, state: str = RunState.SUCCEEDED) -> None:
    """Runs of `made` an hour back and earlier, newest last; None: started, not finished."""
    for i, seconds in enumerate(durations):
        started = NOW - timedelta(hours=1 + len(durations) - i)
        JobRun.objects.create(
            job=made,
            tenant=made.tenant,
            scheduled_at=started,
            created_at=started,
            state=state,
            started_at=started,
            finished_at=None if seconds is None else started + timedelta(seconds=seconds),
        )


@pytest.fixture
def fleet(db, forecast_settings):
    acme = services.tenant_create(slug="acme", name="Acme", timezone="UTC")
    services.calendar_create(acme, name="ops", extra_holidays={HOLIDAY: "Founders' day"})
    five = job(acme, "five", datetime(2031, 3, 3, 23, 55, tzinfo=UTC), queue="alpha", cron="*/5 * * * *")
    runs(five, 100, 300, 200)  # median 200
    JobRun.objects.create(
        job=five, tenant=acme, scheduled_at=NOW - timedelta(minutes=5), created_at=NOW, state=RunState.SKIPPED
    )  # no duration: not counted
    minutely = job(acme, "minutely", datetime(2031, 3, 3, 23, 50, tzinfo=UTC), queue="alpha", every=60)  # overdue
    runs(minutely, 40, 1000, 80)  # median 80
    JobRun.objects.create(
        job=minutely, tenant=acme, scheduled_at=NOW - timedelta(seconds=30), created_at=NOW, state=RunState.QUEUED
    )
    job(acme, "midnight", datetime(2031, 3, 4, 0, 0, tzinfo=UTC), queue="alpha", cron="0 0 * * *")  # no runs
    job(
        acme, "skipping", datetime(2031, 3, 3, 23, 55, tzinfo=UTC), queue="beta", cron="*/5 * * * *", calendar="ops"
    )  # 00:00 and 00:05 fall on the holiday
    busy = job(acme, "busy", datetime(2031, 3, 3, 23, 51, tzinfo=UTC), cron="* * * * *")  # the default queue
    runs(busy, None, None, None, None, None, state=RunState.RUNNING)
    return acme


@pytest.fixture(params=["read_in_sql", "read_in_python"])
def read(request):
    """PostgreSQL's statements, and the ORM's reading the embedded SQLite demo uses: one answer."""
    return getattr(forecast, request.param)


def formula(work: dict[str, float], in_flight: int, burst: float) -> int:
    """docs/autoscaling.md's formula, written out again."""
    slots = [math.ceil(in_flight / CONCURRENCY), math.ceil(burst / (LAG * CONCURRENCY))]
    slots += [
        math.ceil(work[h] / ((seconds + LAG) * CONCURRENCY)) for h, seconds in (("1m", 60), ("5m", 300), ("15m", 900))
    ]
    return max(slots)


def test_fires_per_queue_and_horizon_are_counted_as_the_beat_plans_them(fleet, read):
    found = forecast.compute(NOW, read)

    assert found.fires == {
        # five: 23:55, 00:00, 00:05; minutely: 23:50 (overdue: now) to 00:05; midnight: 00:00
        "alpha": {"1m": 0 + 2 + 0, "5m": 1 + 6 + 0, "15m": 3 + 16 + 1},
        "beta": {"1m": 0, "5m": 1, "15m": 1},  # 23:55 only: the calendar skips the holiday's
        queue_name(""): {"1m": 1, "5m": 5, "15m": 15},
    }


def test_work_is_fires_times_each_jobs_median_with_the_documented_fallbacks(fleet, read):
    found = forecast.compute(NOW, read)

    mean = (200 + 80) / 2  # midnight has no runs: its queue's mean of medians
    assert found.work == {
        "alpha": {"1m": 2 * 80, "5m": 1 * 200 + 6 * 80, "15m": 3 * 200 + 16 * 80 + 1 * mean},
        "beta": {"1m": 0, "5m": DEFAULT, "15m": DEFAULT},  # no runs in the queue: the setting
        queue_name(""): {"1m": DEFAULT, "5m": 5 * DEFAULT, "15m": 15 * DEFAULT},  # running runs have no duration
    }


def test_recommended_workers_follow_the_formula_and_never_drop_below_the_runs_in_flight(fleet, read):
    found = forecast.compute(NOW, read)

    assert found.in_flight == {"alpha": 1, queue_name(""): 5}
    # The bursts: five's 200 s and minutely's 80 s both due at 23:55; skipping's 3 s; busy's 3 s a minute.
    assert found.burst == {"alpha": 200 + 80, "beta": DEFAULT, queue_name(""): DEFAULT}
    assert found.workers == {
        queue: formula(found.work[queue], found.in_flight.get(queue, 0), found.burst[queue])
        for queue in ("alpha", "beta", queue_name(""))
    }
    assert found.workers == {"alpha": 10, "beta": 1, queue_name(""): 5}  # 280 s due within one 30 s lag; 5 running


def test_more_concurrency_or_a_longer_lag_needs_fewer_workers(fleet, forecast_settings):
    forecast_settings.CRONFLEET_FORECAST_WORKER_CONCURRENCY = 4
    assert forecast.compute(NOW).workers == {"alpha": 3, "beta": 1, queue_name(""): 2}
    forecast_settings.CRONFLEET_FORECAST_WORKER_CONCURRENCY = 1
    forecast_settings.CRONFLEET_FORECAST_TARGET_LAG_SECONDS = 3600
    assert forecast.compute(NOW).workers["alpha"] == 1


def test_a_spike_at_one_instant_is_met_before_it_comes_and_not_a_quarter_hour_ahead(db, forecast_settings):
    tenant = services.tenant_create(slug="spiky", name="Spiky", timezone="UTC")
    for i in range(40):
        runs(job(tenant, f"nightly-{i}", NOW + timedelta(minutes=4), queue="night", cron="0 0 * * *"), 6)
    spike = forecast.compute(NOW)

    # 40 runs of 6 s due at one instant: 240 s of slots within the 30 s lag. The 1-minute term
    # alone (0, the spike is 4 minutes off) and the 5-minute one (ceil(240 / 330)) ask for 1.
    assert spike.burst == {"night": 240} and spike.workers == {"night": 8}
    assert forecast.compute(NOW - timedelta(minutes=2)).workers == {"night": 1}  # 6 minutes off: not yet


def test_nothing_due_recommends_no_workers(db, forecast_settings):
    assert forecast.compute(NOW).workers == {}
    assert forecast.recommended_workers({}, 0) == 0


def test_the_durations_read_walk_each_jobs_newest_runs_not_the_ledger(fleet):
    from tests.conftest import rows_read

    five = Job.objects.get(name="five")
    older = [
        JobRun(
            job=five,
            tenant=five.tenant,
            scheduled_at=NOW - timedelta(days=2, minutes=i),
            created_at=NOW,
            state=RunState.SUCCEEDED,
        )
        for i in range(3000)
    ]
    JobRun.objects.bulk_create(older)
    params = {"end": NOW + timedelta(minutes=15), "sample": forecast.DURATION_SAMPLE, "recent": forecast.RECENT_RUNS}

    read, plan = rows_read(forecast.FORECAST_SQL, params, "scheduler_app_jobrun", also=("scheduler_app_job",))

    assert read <= 5 * forecast.RECENT_RUNS, plan


def test_metrics_exposes_the_forecast_and_the_cache_serves_later_scrapes(client, fleet, forecast_settings, monkeypatch):
    monkeypatch.setattr(forecast, "db_now", lambda: NOW)
    families = {
        family.name: family for family in text_string_to_metric_families(client.get("/metrics").content.decode())
    }

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("cronfleet_forecast_fires", (("horizon", "15m"), ("queue", "alpha")))] == 20
    assert samples[("cronfleet_forecast_work_seconds", (("horizon", "5m"), ("queue", "beta")))] == DEFAULT
    assert samples[("cronfleet_forecast_workers", (("queue", "alpha"),))] == 10
    assert (
        {"cronfleet_forecast_fires", "cronfleet_forecast_work_seconds", "cronfleet_forecast_workers"}
        <= set(families)
        <= cluster.NAMES | {family._name for family in metrics.WEB_FAMILIES}  # and the web's own counters
    )

    forecast_settings.CRONFLEET_FORECAST_CACHE_SECONDS = 60
    first = forecast.cached()
    Job.objects.update(enabled=False)
    assert forecast.cached() is first  # within the cache's seconds: not computed again
    forecast_settings.CRONFLEET_FORECAST_CACHE_SECONDS = 0
    assert forecast.cached().workers == {"alpha": 1, queue_name(""): 5}  # the runs in flight remain


def test_a_database_error_leaves_the_rest_of_the_scrape(client, db, forecast_settings, monkeypatch):
    def broken(now):
        raise DatabaseError("the forecast's statement timed out")

    monkeypatch.setattr(forecast, "compute", broken)
    response = client.get("/metrics")

    names = {family.name for family in text_string_to_metric_families(response.content.decode())}
    assert response.status_code == 200 and "cronfleet_due_jobs" in names
    assert not names & {"cronfleet_forecast_fires", "cronfleet_forecast_workers"}
