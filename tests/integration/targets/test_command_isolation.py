"""Command jobs and their command user, without a worker (issue 22, item 6): a run whose
command user cannot be used fails before any program starts. The real worker's isolation
(its environment, the disk bound, detached descendants) is tests/system/targets/test_command_isolation.py,
which uses the programs' directory and the allow-list made here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, RunState
from scheduler_app.worker import execution
from tests.conftest import NOW

FILL = """#!/bin/sh
# Two levels up from the run's own directory, then 16 files of 512 KiB (each under the
# per-file limit, 8 MiB together), then wait.
head -c 1048576 /dev/zero > ../../outside && echo "wrote outside"
i=0
while [ "$i" -lt 16 ]; do head -c 524288 /dev/zero > "part$i"; i=$((i + 1)); done
echo filled
sleep 30
"""

DETACH = """#!/bin/sh
# A child in a session of its own and one whose parent exits as well, each writing its pid
# into ../pids/ (the run's output is lost when Celery's soft time limit comes first), then
# outlive the deadline.
pids="$(dirname "$0")/../pids"
setsid sh -c 'echo $$ > "$1/detached"; exec sleep 40' sh "$pids" &
( setsid sh -c 'echo $$ > "$1/orphan"; exec sleep 40' sh "$pids" & )
sleep 40
"""


@pytest.fixture
def home():
    """bin/ (the programs), a/runs/ (CRONFLEET_COMMAND_CWD), all the command user may read,
    and pids/, where it may write."""
    path = Path(tempfile.mkdtemp(prefix="cronfleet-cmd-test-", dir="/tmp"))
    path.chmod(0o755)
    (path / "bin").mkdir(mode=0o755)
    (path / "pids").mkdir()
    (path / "pids").chmod(0o777)
    (path / "a" / "runs").mkdir(mode=0o755, parents=True)
    for name, text in (("fill.sh", FILL), ("detach.sh", DETACH)):
        (path / "bin" / name).write_text(text)
        (path / "bin" / name).chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def allow_list(home: Path) -> dict:
    paths = {"paths": {"type": "str_list", "max_items": 10, "max_length": 200}}  # no pattern, on purpose
    return {
        "cat": {"executable": "/bin/cat", "argv": ["--", "{paths}"], "params": paths},
        "fill": {"executable": str(home / "bin" / "fill.sh"), "argv": []},
        "detach": {"executable": str(home / "bin" / "detach.sh"), "argv": []},
    }


def test_a_run_whose_command_user_cannot_be_used_fails_without_running(settings, home, tenant):
    settings.CRONFLEET_COMMANDS = allow_list(home)
    settings.CRONFLEET_COMMAND_CWD = str(home / "a" / "runs")
    job = services.job_create(
        tenant,
        services.JobSpec(
            name="cat", target_kind="command", every=3600, command={"name": "cat", "params": {"paths": ["/dev/null"]}}
        ),
    )
    settings.CRONFLEET_COMMAND_USER = "cronfleet-no-such-user"
    run = JobRun.objects.create(job=job, tenant=tenant, scheduled_at=NOW, created_at=NOW, state=RunState.QUEUED)

    outcome = execution.execute_run(run.id, 1, worker="w")

    run.refresh_from_db()
    assert (outcome.state, run.state) == ("failed", RunState.FAILED)  # not retried: it cannot help
    assert run.error.startswith("command_user: there is no user 'cronfleet-no-such-user'")
    assert os.listdir(home / "a" / "runs") == []
