"""Beat side against the real PostgreSQL: claim, plan, record, advance, misfire policies."""

from datetime import timedelta
from unittest import mock

import pytest
from django.db import connections, transaction

from scheduler_app import dispatch
from scheduler_app.models import Job, JobRun, RunState
from tests.conftest import NOW, utc

GRACE = timedelta(seconds=60)


def dispatch_now(now=NOW, limit=100):
    return dispatch.dispatch_due_jobs(now, limit=limit, grace=GRACE)


def test_dispatch_records_a_run_and_advances_next_run_at(make_job):
    job = make_job(cron="* * * * *", next_run_at=utc(2024, 1, 1, 0, 0))

    result = dispatch_now()

    run = JobRun.objects.get()
    assert (run.job_id, run.scheduled_at, run.state, run.attempt) == (job.id, utc(2024, 1, 1, 0, 0), "queued", 1)
    assert [(m.run_id, m.attempt) for m in result.messages] == [(run.id, 1)]
    job.refresh_from_db()
    assert job.next_run_at == utc(2024, 1, 1, 0, 1)


def test_dispatch_ignores_jobs_not_yet_due_and_paused_jobs(make_job):
    make_job(next_run_at=utc(2024, 1, 1, 0, 1))
    make_job(next_run_at=utc(2024, 1, 1, 0, 0), enabled=False)

    assert dispatch_now().claimed == 0
    assert JobRun.objects.count() == 0


def test_dispatch_never_records_a_fire_twice(make_job):
    job = make_job(every_seconds=10, next_run_at=utc(2024, 1, 1, 0, 0, 30))
    JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=utc(2024, 1, 1, 0, 0, 30), created_at=NOW)

    result = dispatch_now()

    assert result.messages == []  # the existing run is not this beat's to publish
    assert JobRun.objects.filter(job=job).count() == 1
    job.refresh_from_db()
    assert job.next_run_at == utc(2024, 1, 1, 0, 0, 40)


def test_one_off_job_fires_once_and_then_has_nothing_left(make_job):
    job = make_job(cron="", run_at=utc(2024, 1, 1, 0, 0, 10), next_run_at=utc(2024, 1, 1, 0, 0, 10))

    dispatch_now()
    dispatch_now(NOW + timedelta(days=1))

    assert list(JobRun.objects.values_list("scheduled_at", flat=True)) == [utc(2024, 1, 1, 0, 0, 10)]
    job.refresh_from_db()
    assert job.next_run_at is None


def test_claim_query_uses_skip_locked(make_job, django_assert_num_queries):
    make_job()

    with transaction.atomic(), django_assert_num_queries(2) as captured:
        dispatch.claim.claim_due_jobs(NOW, limit=10)

    assert captured.captured_queries[0]["sql"] == "SET LOCAL jit = off"  # the ranking's estimates would JIT it
    assert "FOR NO KEY UPDATE SKIP LOCKED" in captured.captured_queries[1]["sql"]


@pytest.mark.django_db(transaction=True)
def test_claim_skips_jobs_locked_by_another_connection(make_job):
    first, second = make_job(), make_job()
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:  # a second beat holds `first`
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM scheduler_app_job WHERE id = %s FOR UPDATE", [first.id])
            result = dispatch_now()
            assert result.claimed == 1
            assert list(JobRun.objects.values_list("job_id", flat=True)) == [second.id]
            cursor.execute("ROLLBACK")
    finally:
        other.close()
    assert dispatch_now().claimed == 1  # released: now the first is claimed too
    assert sorted(JobRun.objects.values_list("job_id", flat=True)) == sorted([first.id, second.id])


def test_dispatch_batch_is_bounded_and_reports_more_work(make_job):
    for _ in range(5):
        make_job()

    assert dispatch_now(limit=2).claimed == 2
    assert dispatch_now(limit=2).claimed == 2
    assert dispatch_now(limit=2).claimed == 1
    assert JobRun.objects.count() == 5


def test_a_broken_publish_leaves_the_runs_recorded(make_job):
    make_job()

    with mock.patch("scheduler_app.dispatch.turn.publish_runs", side_effect=ConnectionError("broker down")):
        with pytest.raises(ConnectionError):
            dispatch.run_turn(NOW, batch_size=10, grace=GRACE)

    assert JobRun.objects.get().state == RunState.QUEUED  # recorded, waiting for recovery


# --- beat downtime: misfire policies, counted from the ledger ---------------------------------

DOWN_SINCE = utc(2024, 1, 1, 0, 0)
BACK_AT = utc(2024, 1, 1, 1, 0, 30)  # the beat was down for an hour; 60 fires of a minutely job


def ledger(job):
    return list(JobRun.objects.filter(job=job).order_by("scheduled_at").values_list("scheduled_at", "state", "reason"))


def test_run_once_coalesces_missed_fires_into_the_latest(make_job):
    job = make_job(cron="* * * * *", next_run_at=DOWN_SINCE, misfire_policy="run_once")

    dispatch_now(BACK_AT)

    rows = ledger(job)
    assert len(rows) == 61  # 00:00 .. 01:00, every fire accounted for
    ran = [at for at, state, _ in rows if state == "queued"]
    assert ran == [utc(2024, 1, 1, 1, 0)]  # on time (inside the grace): it runs, the rest coalesce
    assert {reason for _, state, reason in rows if state == "skipped"} == {"coalesced"}
    job.refresh_from_db()
    assert job.next_run_at == utc(2024, 1, 1, 1, 1)


def test_run_once_runs_the_latest_missed_fire_when_none_is_on_time(make_job):
    job = make_job(cron="0 * * * *", next_run_at=utc(2024, 1, 1, 0, 0), misfire_policy="run_once")

    dispatch_now(utc(2024, 1, 1, 2, 30))

    assert ledger(job) == [
        (utc(2024, 1, 1, 0, 0), "skipped", "coalesced"),
        (utc(2024, 1, 1, 1, 0), "skipped", "coalesced"),
        (utc(2024, 1, 1, 2, 0), "queued", ""),
    ]


def test_run_all_runs_missed_fires_up_to_the_cap(make_job):
    job = make_job(cron="* * * * *", next_run_at=DOWN_SINCE, misfire_policy="run_all", run_all_cap=10)

    dispatch_now(BACK_AT)

    rows = ledger(job)
    assert len(rows) == 61
    ran = [at for at, state, _ in rows if state == "queued"]
    assert ran == [utc(2024, 1, 1, 0, m) for m in range(50, 60)] + [utc(2024, 1, 1, 1, 0)]
    assert {reason for _, state, reason in rows if state == "skipped"} == {"run_all_cap"}


def test_skip_records_missed_fires_with_a_reason(make_job):
    job = make_job(cron="* * * * *", next_run_at=DOWN_SINCE, misfire_policy="skip")

    dispatch_now(BACK_AT)

    rows = ledger(job)
    assert [at for at, state, _ in rows if state == "queued"] == [utc(2024, 1, 1, 1, 0)]
    assert [reason for _, state, reason in rows if state == "skipped"] == ["misfire_skip"] * 60


def test_fires_beyond_the_catchup_window_are_recorded_once_not_run(make_job):
    job = make_job(cron="* * * * *", next_run_at=DOWN_SINCE, misfire_policy="run_all", catchup_window_seconds=600)

    dispatch_now(BACK_AT)

    rows = ledger(job)
    first_at, first_state, first_reason = rows[0]
    assert (first_at, first_state) == (DOWN_SINCE, "skipped")
    assert first_reason.startswith("outside_catchup_window: missed fires up to 2024-01-01T00:50:00")
    assert [at for at, state, _ in rows if state == "queued"] == [utc(2024, 1, 1, 0, m) for m in range(51, 60)] + [
        utc(2024, 1, 1, 1, 0)
    ]
    assert len(rows) == 1 + 10  # one record for the gap, then 00:51 .. 01:00


def test_a_long_gap_is_worked_off_in_bounded_turns(make_job):
    job = make_job(every_seconds=1, next_run_at=utc(2024, 1, 1, 0, 0), misfire_policy="skip")
    now = utc(2024, 1, 1, 0, 45)  # 2,700 missed fires, all inside the default one-day window

    turns = 0
    while Job.objects.due(now).exists():
        dispatch_now(now)
        turns += 1

    assert turns == 3  # at most 1,000 fire times planned per job per turn
    assert JobRun.objects.filter(job=job).count() == 2701
    job.refresh_from_db()
    assert job.next_run_at == utc(2024, 1, 1, 0, 45, 1)
