"""The beat's own upkeep (dispatch.vacuum): after `every` advanced jobs a VACUUM of the job
table clears the dead row versions their advances left, on a thread of its own, and never
waits for a VACUUM another session runs; after `every` recorded runs an ANALYZE of the ledger.
A real `runbeat --once` doing both: the system tier's test_beat_upkeep."""

from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app.dispatch import vacuum
from scheduler_app.dispatch.turn import run_turn
from scheduler_app.models import Job, db_now

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="VACUUM is PostgreSQL's"),
]


JOBS = 40


def job_table_stats() -> tuple[int, int]:
    """(vacuum_count, n_dead_tup) of the job table, read afresh."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT vacuum_count, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'scheduler_app_job'")
        return cursor.fetchone()


def ledger_analyses() -> int:
    """analyze_count of the ledger, read afresh."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'scheduler_app_jobrun'")
        return cursor.fetchone()[0]


def advance_due_jobs(make_job) -> None:
    """JOBS due jobs dispatched by real turns: every advance leaves a dead row version."""
    now = db_now()
    for _ in range(JOBS):
        make_job(every_seconds=3600, next_run_at=now)
    while run_turn(db_now(), batch_size=JOBS, grace=timedelta(seconds=60)).claimed:
        pass
    assert not Job.objects.filter(next_run_at__lte=now).exists()


def test_a_vacuum_starts_after_every_advanced_jobs_and_clears_the_dead_versions(make_job, queue_name):
    advance_due_jobs(make_job)
    runs_before, _ = job_table_stats()
    job_vacuum = vacuum.job_vacuum(every=JOBS)

    assert job_vacuum.note(JOBS - 1) is False  # not yet
    assert not job_vacuum.running()
    assert job_vacuum.note(1) is True
    job_vacuum.wait(timeout=60)

    assert not job_vacuum.running()
    assert job_vacuum.runs == 1
    runs_after, dead = job_table_stats()
    assert runs_after == runs_before + 1
    assert dead == 0
    assert job_vacuum.advanced == 0  # counting starts again


def test_a_vacuum_under_way_elsewhere_is_skipped_not_waited_for(make_job):
    advance_due_jobs(make_job)
    runs_before, _ = job_table_stats()
    # Another session holds the lock a VACUUM takes (as another beat's VACUUM would).
    holder = connection.get_new_connection(connection.get_connection_params())
    try:
        holder.execute("LOCK TABLE scheduler_app_job IN SHARE UPDATE EXCLUSIVE MODE")
        job_vacuum = vacuum.job_vacuum(every=1)
        assert job_vacuum.note(1) is True
        job_vacuum.wait(timeout=60)  # the lock is still held: a waiting VACUUM would still run

        assert not job_vacuum.running()
        assert job_vacuum.runs == 1
    finally:
        holder.rollback()
        holder.close()
    assert job_table_stats()[0] == runs_before


def test_the_next_vacuum_waits_a_multiple_of_what_the_last_one_took(make_job):
    advance_due_jobs(make_job)
    now = [1000.0]
    job_vacuum = vacuum.job_vacuum(every=1, clock=lambda: now[0])
    assert job_vacuum.note(1) is True
    job_vacuum.wait(timeout=60)
    assert job_vacuum.runs == 1
    # The fake clock stood still while it ran: it "took" 0 s. Say it took 2 s instead.
    job_vacuum.not_before = now[0] + vacuum.COST_FACTOR * 2.0

    now[0] += vacuum.COST_FACTOR * 2.0 - 0.5
    assert job_vacuum.note(5) is False  # enough advanced, but too soon
    now[0] += 1.0
    assert job_vacuum.note(1) is True
    job_vacuum.wait(timeout=60)
    assert job_vacuum.runs == 2


def test_the_ledger_is_analyzed_after_every_recorded_runs(make_job):
    advance_due_jobs(make_job)  # JOBS runs recorded
    before = ledger_analyses()
    analyze = vacuum.ledger_analyze(every=JOBS)

    assert analyze.note(JOBS - 1) is False
    assert analyze.note(1) is True
    analyze.wait(timeout=60)

    assert analyze.runs == 1
    assert ledger_analyses() == before + 1
