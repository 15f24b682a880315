"""CRONFLEET_TENANT_DOCUMENT_KEY (issue 40 item 3): `tenants export` seals the document with a
MAC under the key the cells share, and `tenants import` takes it only unchanged, through the
commands as an operator runs them. One database stands for both cells: the exported tenant
is deleted before its document comes back."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from scheduler_app.services import documentfile

pytestmark = pytest.mark.django_db
KEY = "k3y-the-cells-share-0123456789abcdef"


def exported(tmp_path: Path, runs: int = 0) -> Path:
    """A tenant with one job and `runs` finished runs, exported with its runs to a file and
    then gone from this cell."""
    tenant = services.tenant_create(slug="moving", name="Moving", timezone="UTC")
    job = services.job_create(
        tenant, services.JobSpec(name="nightly", cron="0 3 * * *", task_name="scheduler_app.echo")
    )
    JobRun.objects.bulk_create(
        JobRun(
            job=job,
            tenant=tenant,
            scheduled_at=datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=i),
            created_at=datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=i),
            state=RunState.SUCCEEDED,
            finished_at=datetime(2024, 1, 1, 0, 1, tzinfo=UTC) + timedelta(hours=i),
            result=f"run {i}",
        )
        for i in range(runs)
    )
    path = tmp_path / "moving.json"
    cut = (db_now() + timedelta(days=1)).isoformat()
    call_command("tenants", "export", "moving", "--cut", cut, "--file", str(path), "--with-runs", stdout=io.StringIO())
    Tenant.objects.filter(id=tenant.id).delete()
    return path


def import_(path: Path) -> str:
    out = io.StringIO()
    call_command("tenants", "import", str(path), stdout=out)
    return out.getvalue()


@override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY)
def test_a_sealed_document_imports_unchanged_and_not_with_one_character_changed(tmp_path):
    path = exported(tmp_path)
    text = path.read_text()
    assert '\n "mac": "hmac-sha256:' in text
    changed = tmp_path / "changed.json"
    changed.write_text(text.replace('"nightly"', '"nightlz"', 1))

    with pytest.raises(CommandError, match="mac: does not match the document"):
        import_(changed)
    assert not Tenant.objects.filter(slug="moving").exists()

    assert "Imported tenant moving: 1 jobs" in import_(path)
    assert Job.objects.filter(tenant__slug="moving", name="nightly").exists()


def test_a_cell_with_the_key_refuses_a_document_without_a_mac(tmp_path):
    path = exported(tmp_path)  # no key in the exporting cell: no MAC
    assert '"mac"' not in path.read_text()

    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY):
        with pytest.raises(CommandError, match="mac: the document carries no MAC"):
            import_(path)
    assert not Tenant.objects.filter(slug="moving").exists()


def test_a_cell_with_another_key_refuses_the_document(tmp_path):
    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY):
        path = exported(tmp_path)

    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY[::-1]):
        with pytest.raises(CommandError, match="mac: does not match"):
            import_(path)


def test_a_cell_without_the_key_imports_a_sealed_document(tmp_path):
    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY):
        path = exported(tmp_path)

    assert "Imported tenant moving" in import_(path)


@override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY)
def test_the_runs_come_from_the_file_a_line_at_a_time_and_arrive_whole(tmp_path):
    path = exported(tmp_path, runs=2500)  # more than one batch of RUNS_BATCH
    assert isinstance(documentfile.read_document(path)["runs"], documentfile.FileRuns)

    assert "Imported tenant moving: 1 jobs" in import_(path)

    copied = JobRun.objects.filter(tenant__slug="moving").order_by("scheduled_at")
    assert copied.count() == 2500
    assert [run.result for run in (copied.first(), copied.last())] == ["run 0", "run 2499"]
