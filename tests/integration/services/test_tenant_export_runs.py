"""`tenants export --with-runs` streams the runs (services/tenantmove.py: RunRows, dump): read
from the database a batch at a time into a spool before the jobs are locked, and copied into
the file from there, so the export's memory is one batch's whatever the tenant's history,
the file reads back as the document, and the beats can claim the tenant's jobs while the
history is read."""

from __future__ import annotations

import io
import json
import tracemalloc
from datetime import timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from scheduler_app import services
from scheduler_app.models import AuditEvent, JobRun, RunState, db_now
from scheduler_app.services import tenantmove
from tests.conftest import utc

pytestmark = pytest.mark.django_db

RUNS = 4000


@pytest.fixture
def history(make_job, tenant):
    job = make_job(cron="* * * * *", next_run_at=utc(2030, 1, 1))
    JobRun.objects.bulk_create(
        JobRun(
            job=job,
            tenant=tenant,
            scheduled_at=utc(2024, 1, 1) + timedelta(minutes=n),
            created_at=utc(2024, 1, 1),
            state=RunState.SUCCEEDED,
            result="done " * 40,
        )
        for n in range(RUNS)
    )
    JobRun.objects.create(
        job=job, tenant=tenant, scheduled_at=utc(2025, 1, 1), created_at=utc(2025, 1, 1), state=RunState.QUEUED
    )  # open: it stays
    return tenant


def test_export_with_runs_writes_every_finished_run_holding_one_batch_at_a_time(history, tmp_path, monkeypatch):
    monkeypatch.setattr(tenantmove, "RUNS_BATCH", 100)
    path = tmp_path / "history.json"
    out = io.StringIO()
    warm = services.tenant_create(slug="warm", name="Warm")  # its export imports what the command needs
    call_command("tenants", "export", warm.slug, "--cut", "+600", "--file", str(tmp_path / "warm.json"), "--with-runs")

    tracemalloc.start()
    try:
        call_command("tenants", "export", history.slug, "--cut", "+600", "--file", str(path), "--with-runs", stdout=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    document = json.loads(path.read_text())
    assert len(document["runs"]) == RUNS and {run["state"] for run in document["runs"]} == {"succeeded"}
    assert document["runs"][0]["scheduled_at"] == utc(2024, 1, 1).isoformat() and document["jobs"][0]["name"]
    assert f"{RUNS} runs." in out.getvalue()
    assert AuditEvent.objects.get(tenant=history, action=tenantmove.EXPORTED).detail["runs"] == RUNS
    size = path.stat().st_size
    assert peak < size / 4, f"peak {peak} bytes while writing {size}"  # held whole, it is more than the file


def test_the_streamed_file_reads_back_as_the_document_in_one_text(history):
    jobs = list(history.jobs.select_related("calendar", "after_job"))
    runs = tenantmove.RunRows(tenantmove.finished_runs(history, utc(2030, 1, 1)))
    document = tenantmove.export_document(history, jobs, utc(2030, 1, 1), runs)
    out = io.StringIO()

    tenantmove.dump(document, out)

    assert json.loads(out.getvalue()) == json.loads(tenantmove.dumps(document))


@pytest.mark.django_db(transaction=True)
def test_the_jobs_stay_claimable_while_the_history_is_read(history, monkeypatch):
    """A second connection claims the tenant's jobs as a beat does (FOR NO KEY UPDATE SKIP
    LOCKED): it gets the job while the export reads the runs, and not once the fence holds it."""
    claimable: dict[str, int] = {}

    def claim() -> int:
        with psycopg.connect(**second_connection(), autocommit=True) as beat:
            return beat.execute(
                "SELECT count(*) FROM (SELECT id FROM scheduler_app_job WHERE tenant_id = %s "
                "FOR NO KEY UPDATE SKIP LOCKED) AS claimed",
                [history.id],
            ).fetchone()[0]

    read = tenantmove.RunRows.read

    def read_and_look(self):
        claimable["while the runs are read"] = claim()
        read(self)

    def write(document):
        claimable["while the document is written"] = claim()
        assert len(list(document["runs"])) == RUNS

    monkeypatch.setattr(tenantmove.RunRows, "read", read_and_look)
    services.tenant_export(history, db_now() + timedelta(minutes=10), write=write, with_runs=True, actor="test")

    assert claimable == {"while the runs are read": 1, "while the document is written": 0}


def second_connection() -> dict:
    params = connection.settings_dict
    return {
        "dbname": params["NAME"],
        "user": params["USER"] or "postgres",
        "host": params["HOST"] or "127.0.0.1",
        "port": params["PORT"] or 5432,
    }
