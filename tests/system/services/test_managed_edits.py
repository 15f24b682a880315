"""An edit of a job managed by schedules as code, by `manage.py jobs edit` in a process of its
own, warns once on stderr that it is drift (the other front doors:
tests/integration/services/test_managed_edits.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, process_env
from tests.integration.services.test_managed_edits import acme, managed  # noqa: F401 (fixtures)


@pytest.mark.django_db(transaction=True)  # the command runs in a process of its own
def test_a_cli_edit_of_a_managed_job_warns_once_in_a_real_terminal_session(managed):
    done = subprocess.run(
        [sys.executable, "manage.py", "jobs", "edit", "acme/invoices", "--priority", "8", "--yes"],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert done.stderr.count("is drift until") == 1, done.stderr  # the command's warning, not a log line too
    assert done.stderr.startswith("Warning: job acme/invoices"), done.stderr
