"""Command jobs: allow-listed programs run without a shell; every value is ONE argv element.

Here what needs no process: the configuration's checks, each parameter's checks and the argv
built from them, and the refusals that come before anything starts. PROGRAM, written to
tmp_path, is the allow-listed command; tests/system/targets/test_command_running.py runs it.
"""

from __future__ import annotations

import datetime as dt
import sys

import pytest

from scheduler_app.targets.command import InvalidCommand, build_argv, run_command, validate_config

PROGRAM = r"""
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
"""

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
# Injection: a value that would be an option, or holds a control character, is refused
# --------------------------------------------------------------------------------------


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
    assert build_argv("bad", {"day": "2024-01-01", "paths": ["a", "b"]}, entry()) == [
        "--day",
        "2024-01-01",
        "--",
        "a",
        "b",
    ]


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
        (
            "params.paths.max_items",
            {"params": {"day": {"type": "date"}, "paths": {"type": "str_list", "max_length": 3}}},
        ),
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
