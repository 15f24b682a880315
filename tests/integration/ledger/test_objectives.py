"""Fleet objectives counted from the ledger (scheduler_app/ledger/objectives.py): which runs are
events and which are good, each counted once into the tallies and the hours, the window and
the budget read back from the hours, and the exporter's series."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from prometheus_client import CollectorRegistry, generate_latest

from scheduler_app.ledger import objectives
from scheduler_app.models import Job, JobRun, Objective, ObjectiveHour, RunState, Tenant, Trigger
from scheduler_app.observability import objectives as exported
from scheduler_app.services.objectives import objective_create
from tests.conftest import utc

pytestmark = pytest.mark.django_db

DECLARED = utc(2024, 1, 1, 10, 0)
AFTER = objectives.COUNT_AFTER


def declare(tenant, **fields) -> Objective:
    objective = objective_create(tenant, name=fields.pop("name", "o"), **fields)
    Objective.objects.filter(id=objective.id).update(created_at=DECLARED, counted_until=DECLARED)
    objective.refresh_from_db()
    return objective


def run(job: Job, at, *, state=RunState.SUCCEEDED, lag: float | None = 1.0, finished=None, **fields) -> JobRun:
    started = at + timedelta(seconds=lag) if lag is not None else None
    return JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=at,
        created_at=at,
        state=state,
        started_at=started,
        finished_at=finished or (started + timedelta(seconds=1) if started and state in objectives.FINISHED else None),
        **fields,
    )


def test_a_success_objective_counts_runs_that_ended_and_those_that_succeeded(make_job, tenant):
    objective = declare(tenant, kind="success", target="99%")
    job = make_job()
    at = DECLARED + timedelta(minutes=1)
    run(job, at, state=RunState.SUCCEEDED)
    run(job, at + timedelta(seconds=1), state=RunState.FAILED)
    run(job, at + timedelta(seconds=2), state=RunState.DEAD)
    run(job, at + timedelta(seconds=3), state=RunState.RETRYING)  # not ended: no event yet
    run(job, at + timedelta(seconds=4), state=RunState.SUCCEEDED, lag=None, finished=DECLARED - timedelta(seconds=1))

    counted = objectives.count_events(DECLARED + timedelta(minutes=5))

    objective.refresh_from_db()
    assert counted == 3
    assert (objective.good_events, objective.total_events) == (1, 3)
    assert objective.counted_until == DECLARED + timedelta(minutes=5) - AFTER
    assert list(ObjectiveHour.objects.values_list("hour", "good", "total")) == [(DECLARED, 1, 3)]


def test_each_event_is_counted_once_whatever_the_calls(make_job, tenant):
    objective = declare(tenant, kind="success", target="0.9")
    job = make_job()
    for minute in range(1, 90, 7):  # across an hour's end
        run(job, DECLARED + timedelta(minutes=minute), state=RunState.SUCCEEDED)

    for minute in (3, 3, 20, 61, 62, 100, 100):
        objectives.count_events(DECLARED + timedelta(minutes=minute))

    objective.refresh_from_db()
    assert objective.total_events == JobRun.objects.count() == 13
    assert dict(ObjectiveHour.objects.values_list("hour", "total")) == {
        DECLARED: 9,
        DECLARED + timedelta(hours=1): 4,
    }


def test_a_start_objective_judges_each_fire_at_its_threshold(make_job, tenant):
    objective = declare(tenant, kind="start", threshold_seconds=60, target="99%")
    job = make_job()
    at = DECLARED + timedelta(minutes=1)
    run(job, at, lag=5)  # good
    run(job, at + timedelta(seconds=1), lag=61)  # started late
    run(job, at + timedelta(seconds=2), state=RunState.QUEUED, lag=None)  # not started by its threshold
    run(job, at + timedelta(seconds=3), state=RunState.SKIPPED, lag=None, reason="outside_catchup_window")  # missed
    run(job, at + timedelta(seconds=4), state=RunState.SKIPPED, lag=None, reason="overlap_skip")  # no event
    run(job, at + timedelta(seconds=5), state=RunState.CANCELLED, lag=None)  # no event
    run(job, at + timedelta(seconds=6), lag=1, trigger=Trigger.MANUAL)  # not a fire
    # A retried run: its first attempt started in time, its second did not.
    retried = run(job, at + timedelta(seconds=7), lag=300, attempt=2)
    retried.attempts = [{"attempt": 1, "started_at": (retried.scheduled_at + timedelta(seconds=2)).isoformat()}]
    retried.save()

    objectives.count_events(at + timedelta(seconds=30))  # before any threshold: nothing decided
    objective.refresh_from_db()
    assert objective.total_events == 0

    objectives.count_events(at + timedelta(minutes=5))

    objective.refresh_from_db()
    assert (objective.good_events, objective.total_events) == (2, 5)


def test_an_objective_reads_only_its_tenant_and_its_tag(make_job, tenant):
    other = Tenant.objects.create(slug="other-tenant", name="Other")
    tagged = declare(tenant, name="billing", kind="success", target="99%", tag="billing")
    fleet = declare(None, name="fleet-billing", kind="success", target="99%", tag="billing")
    at = DECLARED + timedelta(minutes=1)
    run(make_job(tags=["billing"]), at, state=RunState.FAILED)
    run(make_job(tags=["other"]), at)
    run(Job.objects.create(tenant=other, name="b", cron="* * * * *", tags=["billing"]), at)

    objectives.count_events(DECLARED + timedelta(minutes=5))

    tagged.refresh_from_db()
    fleet.refresh_from_db()
    assert (tagged.good_events, tagged.total_events) == (0, 1)
    assert (fleet.good_events, fleet.total_events) == (1, 2)


def test_the_window_and_the_budget_come_from_the_hours(tenant):
    objective = declare(tenant, kind="success", target="99%", window_days=1)
    now = DECLARED + timedelta(days=2)
    for hours_ago, good, total in ((1, 990, 1000), (10, 1000, 1000), (30, 0, 1000)):  # the last is outside
        ObjectiveHour.objects.create(
            objective=objective, hour=objectives.floor_hour(now) - timedelta(hours=hours_ago), good=good, total=total
        )

    window = objectives.window_of([objective], now)[objective.id]

    assert (window.good, window.total) == (1990, 2000)
    assert window.attainment == pytest.approx(0.995)
    assert window.budget_left == pytest.approx(0.5)  # 10 bad of the 20 allowed


def test_the_exporter_shows_each_objective_with_its_counters_target_and_budget(tenant, monkeypatch):
    monkeypatch.setattr(exported, "_cached", None)
    objective = declare(tenant, name="fires", kind="start", threshold_seconds=60, target="99.5%")
    Objective.objects.filter(id=objective.id).update(good_events=7, total_events=8)
    registry = CollectorRegistry()
    registry.register(exported.ObjectiveCollector())

    text = generate_latest(registry).decode()

    labels = f'kind="start",objective="{tenant.slug}/fires",tag="",tenant="{tenant.slug}"'
    assert f"cronfleet_objective_events_total{{{labels}}} 8.0" in text
    assert f"cronfleet_objective_good_events_total{{{labels}}} 7.0" in text
    assert f"cronfleet_objective_target{{{labels}}} 0.995" in text
    assert f"cronfleet_objective_error_budget_remaining{{{labels}}} 1.0" in text  # no hour counted yet
    assert "cronfleet_objective_attainment{" not in text  # no event in the window: no attainment


@pytest.mark.django_db(transaction=True)
def test_an_objective_another_beat_is_counting_is_skipped(make_job, tenant):
    objective = declare(tenant, kind="success", target="99%")
    run(make_job(), DECLARED + timedelta(minutes=1))
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:  # a second beat counts `objective`
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM scheduler_app_objective WHERE id = %s FOR UPDATE", [objective.id])
            assert objectives.count_events(DECLARED + timedelta(minutes=5)) == 0
            cursor.execute("ROLLBACK")
    finally:
        other.close()

    assert objectives.count_events(DECLARED + timedelta(minutes=5)) == 1
    objective.refresh_from_db()
    assert objective.total_events == 1
