"""Command jobs cannot reach their worker, outgrow their run or outlive it: each proven with
a real worker (issue 22, item 6).

The worker runs as root here (as in CI), commands as the unprivileged user cronfleet-cmd,
made once per session. The programs are in a directory of the test's own that the command
user can read (pytest's tmp_path is not: /tmp/pytest-of-root is private): the `home` fixture
of tests/integration/targets/test_command_isolation.py, with the allow-list naming them.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from scheduler_app import services
from scheduler_app.models import TERMINAL_STATES, JobRun, RunState
from tests.conftest import wait_for
from tests.integration.targets.test_command_isolation import allow_list, home  # noqa: F401 (home: a fixture)

COMMAND_USER = "cronfleet-cmd"
MAX_DISK = 4 * 2**20
CANARY = f"canary-{uuid.uuid4().hex}"


def unavailable(why: str):
    """Skip, except in CI (CI=true), where what these tests need must be there."""
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(f"{why}; CI=true makes this a failure")


@pytest.fixture(scope="session")
def command_user() -> str:
    """The unprivileged user commands run as; made with useradd when missing (root only)."""
    try:
        pwd.getpwnam(COMMAND_USER)
    except KeyError:
        made = (
            os.geteuid() == 0
            and subprocess.run(
                ["useradd", "--system", "--no-create-home", COMMAND_USER], capture_output=True
            ).returncode
            == 0
        )
        if not made:
            unavailable(f"the user {COMMAND_USER} is missing and cannot be made (useradd needs root)")
    if os.geteuid() != 0:
        unavailable("the worker must run as root to switch to the command user")
    return COMMAND_USER


@pytest.fixture
def unprivileged() -> tuple[str, ...]:
    """A prefix that starts the worker as its user without any capability: as root here, a
    worker and its commands would otherwise differ in capabilities, which alone keeps a
    command out of the worker (the kernel's ptrace rule), whatever the worker does."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        unavailable("setpriv (util-linux) is needed to start a worker without capabilities")
    return ("setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--")


@pytest.fixture
def start_worker(settings, home, processes, queue_name):
    """start_worker(user): a real worker on this test's queue, its commands allowed here too."""
    settings.CRONFLEET_COMMANDS = allow_list(home)

    def start(user: str = "", prefix: tuple[str, ...] = (), **env: str):
        return processes.worker(
            queue_name,
            concurrency=1,
            prefix=prefix,
            CRONFLEET_COMMANDS=json.dumps(allow_list(home)),
            CRONFLEET_COMMAND_CWD=str(home / "a" / "runs"),
            CRONFLEET_COMMAND_USER=user,
            CRONFLEET_COMMAND_MAX_DISK_BYTES=str(MAX_DISK),
            CRONFLEET_TEST_CANARY=CANARY,
            **env,
        )

    return start


def trigger(tenant, queue_name, name, params=None, *, timeout=20) -> JobRun:
    """Run command `name` once on the worker (one attempt) and wait for the run to end."""
    job = services.job_create(
        tenant,
        services.JobSpec(
            name=f"{name}-{uuid.uuid4().hex[:6]}",
            target_kind="command",
            every=3600,
            queue=queue_name,
            command={"name": name, "params": params or {}},
            timeout_seconds=timeout,
            max_attempts=1,
        ),
    )
    run = services.job_trigger(job, actor="test")
    wait_for(
        lambda: JobRun.objects.filter(id=run.id, state__in=TERMINAL_STATES).exists(),
        timeout=timeout + 30,
        what=f"the {name} run to end",
    )
    run.refresh_from_db()
    return run


def pool_pids(main_pid: int) -> list[int]:
    """The worker's pool processes: the children of its main process."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        if int(stat[stat.rindex(b")") + 2 :].split()[1]) == main_pid:
            found.append(int(name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def assert_environment_unread(run: JobRun, paths: list[str]) -> None:
    text = f"{run.error}\n{run.result}"
    assert os.environ["DJANGO_SECRET_KEY"] not in text
    assert CANARY not in text
    assert run.state == RunState.DEAD, text  # cat exits 1: it read nothing
    assert text.count("Permission denied") == len(paths), text


# --- the worker's secrets ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_command_run_as_the_command_user_cannot_read_the_worker_s_environment(
    command_user, start_worker, tenant, queue_name
):
    worker = start_worker(command_user)
    paths = [f"/proc/{pid}/environ" for pid in (worker.pid, *pool_pids(worker.pid))]
    assert len(paths) == 2

    run = trigger(tenant, queue_name, "cat", {"paths": paths})

    assert_environment_unread(run, paths)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_command_of_the_worker_s_own_user_cannot_read_the_worker_s_environment(
    unprivileged, start_worker, tenant, queue_name
):
    # No CRONFLEET_COMMAND_USER: only the worker's non-dumpable flag stands in the way.
    worker = start_worker("", prefix=unprivileged)
    paths = [f"/proc/{pid}/environ" for pid in (worker.pid, *pool_pids(worker.pid))]
    assert len(paths) == 2

    run = trigger(tenant, queue_name, "cat", {"paths": paths})

    assert_environment_unread(run, paths)


@pytest.mark.slow
def test_a_worker_that_cannot_switch_to_the_command_user_refuses_to_start(start_worker, processes):
    with pytest.raises(AssertionError):
        start_worker("cronfleet-no-such-user")

    assert "CRONFLEET_COMMAND_USER: there is no user 'cronfleet-no-such-user'" in processes.log("worker")


# --- disk -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_that_writes_more_than_its_disk_bound_is_stopped_and_writes_nothing_outside(
    command_user, start_worker, tenant, queue_name, home
):
    start_worker(command_user)

    run = trigger(tenant, queue_name, "fill", timeout=20)

    assert run.state == RunState.DEAD
    assert run.error.startswith(f"disk_limit: the run held more than {MAX_DISK} bytes"), run.error
    assert (run.finished_at - run.started_at).total_seconds() < 10  # stopped, not timed out at 20 s
    assert "Permission denied" in run.error and "wrote outside" not in run.error
    assert not (home / "outside").exists() and not (home / "a" / "outside").exists()
    assert os.listdir(home / "a" / "runs") == []  # the run's directory went with it


# --- descendants ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_detached_descendants_are_dead_soon_after_the_deadline(command_user, start_worker, tenant, queue_name, home):
    start_worker(command_user)

    run = trigger(tenant, queue_name, "detach", timeout=3)

    pids = [int((home / "pids" / name).read_text()) for name in ("detached", "orphan")]
    try:
        assert run.error.startswith("timeout"), run.error
        assert (run.finished_at - run.started_at).total_seconds() < 3 + 5
        wait_for(lambda: not any(map(alive, pids)), timeout=5, what=f"the detached sleeps {pids} to be gone")
    finally:
        for pid in filter(alive, pids):  # today's code leaves them: ours to end
            os.kill(pid, signal.SIGKILL)
