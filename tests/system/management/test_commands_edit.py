"""`manage.py jobs edit` and `jobs delete` in a real manage.py process with no terminal: both
refuse without --yes (edit after showing the impact), and edit saves with it. The in-process
tests are in tests/integration/management/test_commands_edit.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scheduler_app import services
from tests.conftest import ROOT, process_env
from tests.support.cli import add_job


@pytest.mark.django_db(transaction=True)
def test_edit_and_delete_in_a_real_process_with_no_terminal():
    job = add_job(services.tenant_create(slug="acme"), every=60)
    env = process_env()

    def manage(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    refused = manage("jobs", "edit", "acme/nightly", "--every", "120")
    saved = manage("jobs", "edit", "acme/nightly", "--every", "120", "--yes")
    kept = manage("jobs", "delete", "acme/nightly")

    assert refused.returncode == 2 and "next 5 fires after the edit:" in refused.stdout
    assert refused.stderr == (
        "jobs edit: not saved: no terminal to ask for confirmation; pass --yes to go ahead without asking\n"
    )
    assert saved.returncode == 0 and saved.stdout.splitlines()[-1].startswith(f"Saved job {job.id}"), saved.stderr
    assert kept.returncode == 2 and kept.stderr.startswith("jobs delete: not deleted: no terminal")
    job.refresh_from_db()
    assert job.every_seconds == 120
