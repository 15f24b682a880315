"""Command jobs: allow-listed programs run without a shell; every value is ONE argv element.

No database: a small Python program written to tmp_path is the allow-listed command.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import resource
import sys
import time

import pytest

from scheduler_app.targets.command import (
    CommandResult,
    InvalidCommand,
    build_argv,
    run_command,
    validate_config,
)

PROGRAM = r'''
import json, os, resource, subprocess, sys, time

args = sys.argv[1:]
mode = args[0] if args else "echo"
if mode == "echo":
    print(json.dumps(args))
elif mode == "env":
    print(json.dumps(dict(os.environ)))
elif mode == "cwd":
    print(json.dumps(os.getcwd()))
elif mode == "exit":
    print("exiting", flush=True)
    sys.stderr.write("bad things\n")
    sys.exit(int(args[1]))
elif mode == "flood":
    block = b"x" * 65536
    for _ in range(int(args[1]) // len(block)):
        sys.stdout.buffer.write(block)
        sys.stderr.buffer.write(block)
elif mode == "spawn":  # start a `sleep 30` child, report its pid, then sleep (or not)
    child = subprocess.Popen(["sleep", "30"])
    print(child.pid, flush=True)
    time.sleep(int(args[1]))
elif mode == "detach":  # a `sleep 30` in a session of its own whose parent is gone, then sleep
    if os.fork() == 0:
        child = subprocess.Popen(["sleep", "30"], start_new_session=True)
        print(child.pid, flush=True)
        os._exit(0)
    os.wait()
    time.sleep(int(args[1]))
elif mode == "fill":  # N files of SIZE bytes in the working directory, then sleep
    for i in range(int(args[1])):
        with open(f"f{i}", "wb") as f:
            f.write(b"x" * int(args[2]))
    print("filled", flush=True)
    time.sleep(int(args[3]))
elif mode == "hide":  # N files of SIZE bytes, each deleted before it is written, kept open
    kept = []
    for i in range(int(args[1])):
        kept.append(open(f"h{i}", "wb"))
        os.unlink(f"h{i}")
        kept[-1].write(b"x" * int(args[2]))
        kept[-1].flush()
    print("hidden", flush=True)
    time.sleep(30)
elif mode == "limits":
    names = ["RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CPU"]
    print(json.dumps({n: resource.getrlimit(getattr(resource, n)) for n in names}))
'''

MAX_OUT = 100_000


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return str(path)


@pytest.fixture
def config(script):
    return {
        "echo": {
            "executable": sys.executable,
            "argv": [script, "echo", "{word}", "--", "{word}", "{rest}"],
            "params": {
                "word": {"type": "str", "max_length": 100},
                "rest": {"type": "str_list", "max_items": 5, "max_length": 50, "default": []},
            },
        },
        "env": {"executable": sys.executable, "argv": [script, "env"]},
        "cwd": {"executable": sys.executable, "argv": [script, "cwd"]},
        "cwd_fixed": {"executable": sys.executable, "argv": [script, "cwd"], "cwd": "/"},
        "exit": {
            "executable": sys.executable,
            "argv": [script, "exit", "{code}"],
            "params": {"code": {"type": "int", "min": 0, "max": 255}},
        },
        "flood": {
            "executable": sys.executable,
            "argv": [script, "flood", "{nbytes}"],
            "params": {"nbytes": {"type": "int", "min": 0, "max": 10**8}},
        },
        "spawn": {
            "executable": sys.executable,
            "argv": [script, "spawn", "{seconds}"],
            "params": {"seconds": {"type": "int", "min": 0, "max": 60}},
        },
        "spawn_short": {
            "executable": sys.executable,
            "argv": [script, "spawn", "30"],
            "timeout": 1,
        },
        "limits": {"executable": sys.executable, "argv": [script, "limits"]},
        "detach": {
            "executable": sys.executable,
            "argv": [script, "detach", "{seconds}"],
            "params": {"seconds": {"type": "int", "min": 0, "max": 60}},
        },
        "fill": {
            "executable": sys.executable,
            "argv": [script, "fill", "{files}", "{size}", "{seconds}"],
            "params": {n: {"type": "int", "min": 0, "max": 10**8} for n in ("files", "size", "seconds")},
        },
        "hide": {
            "executable": sys.executable,
            "argv": [script, "hide", "{files}", "{size}"],
            "params": {n: {"type": "int", "min": 0, "max": 10**8} for n in ("files", "size")},
        },
        "report": {  # the example of the brief
            "executable": sys.executable,
            "argv": ["-m", "reports.run", "--day", "{day}", "--format", "{format}", "--", "{paths}"],
            "params": {
                "day": {"type": "date"},
                "format": {"type": "choice", "choices": ["csv", "json"], "default": "csv"},
                "paths": {"type": "str_list", "max_items": 10, "max_length": 200},
                "limit": {"type": "int", "min": 1, "max": 1000},
                "name": {"type": "str", "max_length": 100, "pattern": "^[A-Za-z0-9_.-]+$"},
            },
            "timeout": 60,
            "cwd": "/tmp",
        },
    }


def run(name, params, config, tmp_path, **kwargs):
    kwargs.setdefault("timeout", 20)
    kwargs.setdefault("runs_dir", str(tmp_path / "runs"))
    kwargs.setdefault("max_output_bytes", MAX_OUT)
    return run_command(name, params, config=config, **kwargs)


def refused(field, func, *args, **kwargs) -> InvalidCommand:
    with pytest.raises(InvalidCommand) as info:
        func(*args, **kwargs)
    assert info.value.field == field, str(info.value)
    assert str(info.value) == f"{field}: {info.value.message}"
    assert isinstance(info.value, ValueError)
    return info.value


REPORT_OK = {"day": "2024-02-29", "paths": ["a"], "limit": 5, "name": "x"}


def report(**changes):
    params = {**REPORT_OK, **changes}
    return {k: v for k, v in params.items() if v is not ...}


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
        script, "echo", value, "--", value, *rest,
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


def test_negative_int_before_marker_is_refused(script):
    config = {
        "neg": {
            "executable": sys.executable,
            "argv": [script, "{n}"],
            "params": {"n": {"type": "int", "min": -5, "max": 5}},
        }
    }
    assert build_argv("neg", {"n": 3}, config) == [script, "3"]
    refused("params.n", build_argv, "neg", {"n": -3}, config)


@pytest.mark.parametrize(
    "value",
    ["a\x00b", "a\nb", "a\rb", "a\tb", "\x1b[31mred", "del\x7f", "c1\x85", "\x00", "lone\udcff"],
)
def test_nul_and_control_characters_refused(value, config):
    refused("params.word", build_argv, "echo", {"word": value}, config)
    refused("params.rest[1]", build_argv, "echo", {"word": "w", "rest": ["ok", value]}, config)


# --------------------------------------------------------------------------------------
# Parameter validation
# --------------------------------------------------------------------------------------


def test_report_example_builds_expected_argv(config):
    assert validate_config(config) is None
    argv = build_argv("report", {"day": dt.date(2024, 1, 31), "paths": ["a b", "-c"], "limit": 1, "name": "n"}, config)
    assert argv == ["-m", "reports.run", "--day", "2024-01-31", "--format", "csv", "--", "a b", "-c"]
    argv = build_argv("report", report(format="json", paths=[]), config)
    assert argv == ["-m", "reports.run", "--day", "2024-02-29", "--format", "json", "--"]


def test_unknown_command_refused(config, tmp_path):
    refused("command", build_argv, "rm", {}, config)
    refused("command", run, "../echo", {"word": "x"}, config, tmp_path)


def test_unknown_and_missing_params_refused(config):
    refused("params.bogus", build_argv, "report", report(bogus=1), config)
    refused("params.day", build_argv, "report", report(day=...), config)
    refused("params.paths", build_argv, "report", report(paths=...), config)
    refused("params.word", build_argv, "echo", {}, config)


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("params.limit", {"limit": "5"}),
        ("params.limit", {"limit": True}),
        ("params.limit", {"limit": 5.0}),
        ("params.limit", {"limit": 0}),
        ("params.limit", {"limit": 1001}),
        ("params.name", {"name": 5}),
        ("params.name", {"name": "a b"}),
        ("params.name", {"name": "x" * 101}),
        ("params.name", {"name": "ok\n"}),  # `$` would match before a trailing newline
        ("params.format", {"format": "xml"}),
        ("params.format", {"format": ["csv"]}),
        ("params.day", {"day": "2024-13-01"}),
        ("params.day", {"day": "2023-02-29"}),
        ("params.day", {"day": "2024-1-1"}),
        ("params.day", {"day": "20240101"}),
        ("params.day", {"day": "2024-01-01T00:00"}),
        ("params.day", {"day": "２０２４-01-01"}),
        ("params.day", {"day": dt.datetime(2024, 1, 1)}),
        ("params.day", {"day": 20240101}),
        ("params.paths", {"paths": "a"}),
        ("params.paths", {"paths": ["p"] * 11}),
        ("params.paths[1]", {"paths": ["ok", 3]}),
        ("params.paths[0]", {"paths": ["x" * 201]}),
    ],
)
def test_wrong_types_and_out_of_range_refused(field, changes, config):
    base = build_argv("report", report(), config)  # the base params are fine
    assert base == ["-m", "reports.run", "--day", "2024-02-29", "--format", "csv", "--", "a"]
    refused(field, build_argv, "report", report(**changes), config)


def test_bounds_are_inclusive(config):
    for limit in (1, 1000):
        argv = build_argv("report", report(limit=limit, name="x" * 100, paths=["p" * 200] * 10), config)
        assert argv == ["-m", "reports.run", "--day", "2024-02-29", "--format", "csv", "--", *["p" * 200] * 10]


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


def entry(**changes):
    base = {
        "executable": sys.executable,
        "argv": ["--day", "{day}", "--", "{paths}"],
        "params": {
            "day": {"type": "date"},
            "paths": {"type": "str_list", "max_items": 3, "max_length": 10},
        },
    }
    base.update(changes)
    return {"bad": base}


def test_valid_config_accepted(config):
    assert validate_config(config) is None
    assert validate_config(entry()) is None
    assert validate_config({}) is None
    assert build_argv("bad", {"day": "2024-01-01", "paths": ["a", "b"]}, entry()) == ["--day", "2024-01-01", "--", "a", "b"]


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("executable", {"executable": "python3"}),
        ("executable", {"executable": "./python3"}),
        ("executable", {"executable": "/nonexistent/bin/tool"}),
        ("executable", {"executable": "/tmp"}),
        ("argv[1]", {"argv": ["{day}", "--day={day}"]}),
        ("argv[0]", {"argv": ["--day={day}"]}),
        ("argv[0]", {"argv": ["{day}x"]}),
        ("argv[0]", {"argv": ["{day:>20}"]}),
        ("argv[0]", {"argv": ["{day!r}"]}),
        ("argv[0]", {"argv": ["{day.year}"]}),
        ("argv[0]", {"argv": ["{{day}}"]}),
        ("argv[0]", {"argv": ["{}"]}),
        ("argv[0]", {"argv": ["{nope}"]}),
        ("argv[0]", {"argv": ["{paths}", "--"]}),
        ("argv[1]", {"argv": ["-x", "{paths}"]}),
        ("argv[0]", {"argv": [3]}),
        ("argv[0]", {"argv": ["a\x00b"]}),
        ("argv", {"argv": "--day {day}"}),
        ("params.day.type", {"params": {"day": {"type": "datetime"}}}),
        ("params.day.default", {"params": {"day": {"type": "date", "default": "yesterday"}}}),
        ("params.day.choices", {"params": {"day": {"type": "choice", "choices": []}}}),
        ("params.day.default", {"params": {"day": {"type": "choice", "choices": ["a"], "default": "b"}}}),
        ("params.day.max_length", {"params": {"day": {"type": "str"}}}),
        ("params.day.pattern", {"params": {"day": {"type": "str", "max_length": 5, "pattern": "("}}}),
        ("params.day.min", {"params": {"day": {"type": "int", "min": "1"}}}),
        ("params.day.maximum", {"params": {"day": {"type": "int", "maximum": 1}}}),
        ("params.paths.max_items", {"params": {"day": {"type": "date"}, "paths": {"type": "str_list", "max_length": 3}}}),
        ("timeout", {"timeout": 0}),
        ("timeout", {"timeout": True}),
        ("cwd", {"cwd": "relative/dir"}),
        ("shell", {"shell": True}),
    ],
)
def test_bad_config_refused(field, changes, tmp_path):
    refused(f"CRONFLEET_COMMANDS.bad.{field}", validate_config, entry(**changes))


def test_non_executable_file_refused(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    refused("CRONFLEET_COMMANDS.bad.executable", validate_config, entry(executable=str(plain)))


def test_bad_config_also_refused_at_build_and_run_time(tmp_path):
    config = entry(argv=["--day={day}"])
    refused("CRONFLEET_COMMANDS.bad.argv[0]", build_argv, "bad", {"day": "2024-01-01"}, config)
    refused("CRONFLEET_COMMANDS.bad.argv[0]", run, "bad", {"day": "2024-01-01"}, config, tmp_path)


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
