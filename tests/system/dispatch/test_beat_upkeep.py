"""The beat's own upkeep in a real `runbeat --once` process: it vacuums the job table after
advancing jobs and analyzes the ledger after recording runs (dispatch.vacuum)."""

import subprocess
import sys

import pytest
from django.db import connection

from scheduler_app.models import db_now
from tests.conftest import ROOT, process_env
from tests.integration.dispatch.test_beat_upkeep import job_table_stats, ledger_analyses

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="VACUUM is PostgreSQL's"),
]


def test_a_beat_vacuums_the_job_table_after_advancing_jobs(make_job, queue_name):
    job = make_job(every_seconds=3600, next_run_at=db_now(), queue=queue_name)
    runs_before, _ = job_table_stats()

    done = beat_once(CRONFLEET_JOB_VACUUM_EVERY="1")

    assert done.returncode == 0, done.stderr
    assert job.runs.count() == 1
    assert "job table vacuumed" in done.stdout + done.stderr
    assert job_table_stats()[0] == runs_before + 1


def test_a_beat_analyzes_the_ledger_after_recording_runs(make_job, queue_name):
    job = make_job(every_seconds=3600, next_run_at=db_now(), queue=queue_name)
    before = ledger_analyses()

    done = beat_once(CRONFLEET_LEDGER_ANALYZE_EVERY="1")

    assert done.returncode == 0, done.stderr
    assert job.runs.count() == 1
    assert "ledger analyzed" in done.stdout + done.stderr
    assert ledger_analyses() == before + 1


def beat_once(**env: str) -> subprocess.CompletedProcess:
    """One turn of a real `runbeat --once` process with these settings."""
    return subprocess.run(
        [sys.executable, "manage.py", "runbeat", "--once"],
        cwd=ROOT,
        env=process_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
