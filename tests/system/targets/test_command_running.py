"""Command jobs run: a hostile value is still ONE argv element of the program, the environment
is minimal, the timeout, the disk bound and the output cap stop a run and everything it
started, each run works in a directory of its own and under resource limits.

No database: a small Python program written to tmp_path (tests/unit/targets/test_command_jobs.py's
PROGRAM) is the allow-listed command.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time

import pytest

from scheduler_app.targets.command import CommandResult, build_argv
from tests.unit.targets.test_command_jobs import config, refused, run, script  # noqa: F401 (config, script: fixtures)

# --------------------------------------------------------------------------------------
# Injection: every value arrives as ONE literal argv element
# --------------------------------------------------------------------------------------

HOSTILE = [
    "; rm -rf /",
    "$(id)",
    "`id`",
    "a && touch pwned",
    "a | tee pwned",
    "*",
    "> pwned",
    "~root",
    "'quoted' \"double\" \\back",
    "{word} {0} %s $HOME",
    "a b\u00a0c",
    "żółć 日本語 ✓ 🚀 \u202eevil",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_value_is_one_literal_argv_element(value, config, script, tmp_path):
    rest = [value, "-rf", "--help", "--"]
    result = run("echo", {"word": value, "rest": rest}, config, tmp_path)
    assert (result.exit_code, result.timed_out, result.truncated) == (0, False, False)
    assert json.loads(result.stdout) == ["echo", value, "--", value, *rest]
    assert build_argv("echo", {"word": value, "rest": rest}, config) == [
        script,
        "echo",
        value,
        "--",
        value,
        *rest,
    ]
    assert sorted(os.listdir(tmp_path)) == ["prog.py", "runs"]  # nothing was created by a shell
    assert os.listdir(tmp_path / "runs") == []  # and the run's own directory is gone


def test_leading_dash_allowed_after_marker_only(config, script, tmp_path):
    # "{word}" is placed both before and after "--": before it, "-rf" is an option -> refused.
    refused("params.word", build_argv, "echo", {"word": "-rf"}, config)
    refused("params.word", build_argv, "echo", {"word": "--help"}, config)
    # After "--" (the str_list) it is a literal operand.
    result = run("echo", {"word": "ok", "rest": ["-rf", "-"]}, config, tmp_path)
    assert json.loads(result.stdout) == ["echo", "ok", "--", "ok", "-rf", "-"]


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


def test_environment_is_minimal(config, tmp_path, monkeypatch):
    monkeypatch.setenv("CRONFLEET_SECRET", "hunter2")
    result = run("env", {}, config, tmp_path, env_extra={"CRONFLEET_RUN_ID": "42"})
    env = json.loads(result.stdout)
    run_dir = env["TMPDIR"]
    assert env == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "CRONFLEET_RUN_ID": "42",
        "TMPDIR": run_dir,
        "HOME": run_dir,
    }
    assert os.path.dirname(run_dir) == str(tmp_path / "runs")
    assert json.loads(run("env", {}, config, tmp_path).stdout).keys() == {"PATH", "LANG", "TMPDIR", "HOME"}
    refused("env_extra.A=B", run, "env", {}, config, tmp_path, env_extra={"A=B": "1"})
    refused("env_extra.A", run, "env", {}, config, tmp_path, env_extra={"A": "x\x00y"})


def _gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for its new parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def _wait_gone(pid: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return _gone(pid)


def test_timeout_kills_the_process_group(config, tmp_path):
    result = run("spawn", {"seconds": 30}, config, tmp_path, timeout=1)
    assert result.timed_out is True
    assert result.exit_code is None
    assert 1 <= result.elapsed < 1 + 2
    child = int(result.stdout.split()[0])  # output up to the timeout is kept
    assert _wait_gone(child), f"sleep child {child} survived"


def test_per_command_timeout_overrides_default(config, tmp_path):
    result = run("spawn_short", {}, config, tmp_path, timeout=30)
    assert result.timed_out is True and result.exit_code is None
    assert result.elapsed < 1 + 2
    assert _wait_gone(int(result.stdout.split()[0]))


def test_leftover_children_do_not_outlive_the_job(config, tmp_path):
    # The main process exits at once; the `sleep 30` it started holds the pipes open.
    result = run("spawn", {"seconds": 0}, config, tmp_path, timeout=20)
    assert (result.exit_code, result.timed_out) == (0, False)
    assert result.elapsed < 5
    assert _wait_gone(int(result.stdout.split()[0]))


def test_detached_children_do_not_outlive_the_job(config, tmp_path):
    # The detached `sleep 30` called setsid and lost its parent: no process group reaches it.
    result = run("detach", {"seconds": 0}, config, tmp_path, timeout=20)

    assert (result.exit_code, result.timed_out) == (0, False)
    assert _wait_gone(int(result.stdout.split()[0]))


def test_timeout_kills_detached_children_too(config, tmp_path):
    result = run("detach", {"seconds": 30}, config, tmp_path, timeout=1)

    assert result.timed_out is True and result.elapsed < 1 + 2
    assert _wait_gone(int(result.stdout.split()[0]))


def test_a_run_holding_more_than_its_disk_bound_is_stopped(config, tmp_path):
    # 16 files of 256 KiB: each under the per-file limit, together twice the run's bound.
    result = run("fill", {"files": 16, "size": 2**18, "seconds": 30}, config, tmp_path, max_disk_bytes=2**21)

    assert (result.disk_exceeded, result.timed_out, result.exit_code) == (True, False, None)
    assert result.elapsed < 5
    assert os.listdir(tmp_path / "runs") == []


def test_a_run_that_wrote_too_much_and_exited_is_over_its_bound_too(config, tmp_path):
    result = run("fill", {"files": 16, "size": 2**18, "seconds": 0}, config, tmp_path, max_disk_bytes=2**21)

    assert (result.disk_exceeded, result.exit_code) == (True, None)
    within = run("fill", {"files": 4, "size": 2**18, "seconds": 0}, config, tmp_path, max_disk_bytes=2**21)
    assert (within.disk_exceeded, within.exit_code) == (False, 0)


def test_files_deleted_while_still_open_count_against_the_bound(config, tmp_path):
    result = run("hide", {"files": 3, "size": 2**20}, config, tmp_path, max_disk_bytes=2**21, timeout=20)

    # Every byte it wrote is in a file already deleted; the stop may come before or after it
    # says "hidden" (the third file's write puts it over the bound, the print follows).
    assert result.stdout in ("", "hidden\n")
    assert (result.disk_exceeded, result.timed_out) == (True, False)
    assert result.elapsed < 5


def test_huge_output_is_truncated_at_cap(config, tmp_path):
    result = run("flood", {"nbytes": 8 * 2**20}, config, tmp_path, max_output_bytes=1000)
    assert result == CommandResult(
        exit_code=0,
        stdout="x" * 1000,
        stderr="x" * 1000,
        truncated=True,
        elapsed=result.elapsed,
        timed_out=False,
    )
    small = run("flood", {"nbytes": 65536}, config, tmp_path, max_output_bytes=65536)
    assert (len(small.stdout), len(small.stderr), small.truncated) == (65536, 65536, False)


def test_non_zero_exit_code_is_returned(config, tmp_path):
    result = run("exit", {"code": 3}, config, tmp_path)
    assert (result.exit_code, result.timed_out, result.truncated) == (3, False, False)
    assert result.stdout == "exiting\n"
    assert result.stderr == "bad things\n"
    refused("params.code", run, "exit", {"code": 256}, config, tmp_path)


def test_each_run_works_in_a_new_directory_of_its_own(config, tmp_path):
    runs = tmp_path / "runs dir"

    first = json.loads(run("cwd", {}, config, tmp_path, runs_dir=str(runs)).stdout)
    second = json.loads(run("cwd", {}, config, tmp_path, runs_dir=str(runs)).stdout)

    assert os.path.dirname(first) == os.path.dirname(second) == str(runs)
    assert first != second
    assert os.listdir(runs) == []  # removed after each run
    assert json.loads(run("cwd_fixed", {}, config, tmp_path, runs_dir=str(runs)).stdout) == "/"
    refused("runs_dir", run, "cwd", {}, config, tmp_path, runs_dir="relative")
    missing = {"cwd_missing": {**config["cwd"], "cwd": str(tmp_path / "missing")}}
    refused("cwd", run, "cwd_missing", {}, missing, tmp_path)


def test_resource_limits_applied(config, tmp_path):
    limits = json.loads(run("limits", {}, config, tmp_path, timeout=4.2).stdout)

    def expected(name, wanted):
        hard = resource.getrlimit(getattr(resource, name))[1]
        value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        return [value, value]

    assert limits == {
        "RLIMIT_CORE": expected("RLIMIT_CORE", 0),
        "RLIMIT_NOFILE": expected("RLIMIT_NOFILE", 256),
        "RLIMIT_FSIZE": expected("RLIMIT_FSIZE", 64 * 2**20),
        "RLIMIT_CPU": expected("RLIMIT_CPU", math.ceil(4.2) + 1),
    }
    small = json.loads(run("limits", {}, config, tmp_path, max_disk_bytes=2**20).stdout)
    assert small["RLIMIT_FSIZE"] == expected("RLIMIT_FSIZE", 2**20)  # no file is larger than the run's bound
