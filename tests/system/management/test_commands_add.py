"""`manage.py jobs add` in a real manage.py process: bad input is one line on stderr with
exit status 2, a good job is created (status 0). The in-process tests of `jobs add` are in
tests/integration/management/test_commands_add.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scheduler_app import services
from scheduler_app.models import Job
from tests.conftest import ROOT, process_env
from tests.integration.management.test_commands_add import BAD_CRON_LINE, add_argv


@pytest.mark.django_db(transaction=True)
def test_exit_status_of_a_real_manage_py_process():
    services.tenant_create(slug="acme")
    env = process_env()

    def manage(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )

    bad = manage(*add_argv(["--cron", "0 0 31 2 *"]))
    good = manage(*add_argv(["--cron", "0 0 1 2 *"]))
    unknown = manage("jobs", "show", "acme/missing")

    assert (bad.returncode, bad.stdout, bad.stderr) == (2, "", BAD_CRON_LINE + "\n")
    assert good.returncode == 0 and good.stdout.startswith("Created job "), good.stderr
    assert (unknown.returncode, unknown.stderr) == (2, "jobs show: job: no job 'acme/missing'\n")
    assert list(Job.objects.values_list("cron", flat=True)) == ["0 0 1 2 *"]
