"""`tenants export --with-runs` streams the runs (services/tenantmove.py: RunRows, dump): read
from the database a batch at a time and written as they come, so the export's memory is one
batch's whatever the tenant's history, and the file reads back as the document."""

from __future__ import annotations

import io
import json
import tracemalloc
from datetime import timedelta

import pytest
from django.core.management import call_command

from scheduler_app import services
from scheduler_app.models import AuditEvent, JobRun, RunState
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
    document = tenantmove.export_document(history, jobs, utc(2030, 1, 1), with_runs=True)
    out = io.StringIO()

    tenantmove.dump(document, out)

    assert json.loads(out.getvalue()) == json.loads(tenantmove.dumps(document))
