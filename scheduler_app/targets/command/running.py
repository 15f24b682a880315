"""Command jobs: run a program named in an allow-list, never through a shell.

No Django imports: the allow-list (later ``settings.CRONFLEET_COMMANDS``) is passed in as
``config``.  One entry looks like::

    "report": {
        "executable": "/usr/bin/python3",      # absolute, existing, executable
        "argv": ["-m", "reports.run", "--day", "{day}", "--", "{paths}"],
        "params": {
            "day": {"type": "date"},
            "paths": {"type": "str_list", "max_items": 10, "max_length": 200,
                      "pattern": "[A-Za-z0-9_-]+[.]csv"},  # no "/": no file of the worker's
        },
        "timeout": 60,                          # optional: overrides the job's timeout
        "cwd": "/srv/reports",                  # optional: start there, not in the run's own directory
    }

Template elements are either literals or exactly one whole ``"{param}"``; each placeholder
becomes exactly ONE argv element (a ``str_list`` becomes one element per item and may only
appear after the literal ``"--"``).  No partial substitution, no format specs.  Values
placed before ``"--"`` may not start with ``-`` (they would be read as options).

The program runs with ``shell=False``, stdin from /dev/null, a minimal environment, in a
private directory of its own (removed afterwards), as CRONFLEET_COMMAND_USER when one is
set, with resource limits, output capped at ``max_output_bytes`` per stream (the rest is
read and discarded) and what it writes under its directory capped at ``max_disk_bytes``,
under a supervisor (supervise.py) that kills everything the run started, detached or not,
when its main process exits or the run is stopped. isolation.py has the reasons for each
defence; docs/targets-command.md says what is isolated and what is not.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import selectors
import signal
import subprocess
import sys
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from scheduler_app.targets import params as paramspecs
from scheduler_app.targets.command import isolation

CONFIG_FIELD = "CRONFLEET_COMMANDS"
END_OF_OPTIONS = "--"
BASE_ENV = MappingProxyType({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})

RLIMIT_NOFILE = 256
RLIMIT_FSIZE = 64 * 1024 * 1024  # per file (and never more than the run's max_disk_bytes)
MAX_DISK_BYTES = 256 * 1024 * 1024  # per run, the default of CRONFLEET_COMMAND_MAX_DISK_BYTES
DISK_CHECK_INTERVAL = 0.2  # seconds between looks at a run's disk (longer if a look is slow)
STOP_GRACE = 5.0  # seconds the supervisor has to kill a stopped run before the worker does
SUPERVISOR = str(Path(__file__).with_name("supervise.py"))

_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_COMMAND_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_ENTRY_KEYS = frozenset({"executable", "argv", "params", "timeout", "cwd"})
_TYPE_KEYS = {
    "int": frozenset({"type", "default", "min", "max"}),
    "str": frozenset({"type", "default", "max_length", "pattern"}),
    "choice": frozenset({"type", "default", "choices"}),
    "date": frozenset({"type", "default"}),
    "str_list": frozenset({"type", "default", "max_items", "max_length", "pattern"}),
}

_EMPTY: Mapping[str, str] = MappingProxyType({})
_READ_CHUNK = 65536
_POLL_INTERVAL = 0.05


class InvalidCommand(paramspecs.FieldError):
    """A command, its parameters or its configuration is refused; ``field`` names what."""


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None  # None when timed out; negative N = killed by signal N
    stdout: str
    stderr: str
    truncated: bool  # True if stdout or stderr was cut at max_output_bytes
    elapsed: float  # seconds
    timed_out: bool
    disk_exceeded: bool = False  # stopped (or failed) for holding more than max_disk_bytes


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


_is_int, _is_number = paramspecs.is_int, paramspecs.is_number


def _bad_char(value: str) -> str | None:
    """Describe the first forbidden character in ``value`` (NUL, control, surrogate)."""
    for ch in value:
        if ch == "\x00":
            return "contains a NUL character"
        category = unicodedata.category(ch)
        if category == "Cc":
            return f"contains a control character (U+{ord(ch):04X})"
        if category == "Cs":
            return f"contains a lone surrogate (U+{ord(ch):04X})"
    return None


def _placeholder(element: str) -> str | None:
    match = _PLACEHOLDER.fullmatch(element)
    return match.group(1) if match else None


def _validate_param_spec(field: str, spec: object) -> None:
    ptype = paramspecs.check_declaration(field, spec, _TYPE_KEYS, InvalidCommand)
    assert isinstance(spec, Mapping)  # check_declaration refuses anything else
    if ptype == "choice":  # each choice becomes an argv element
        for index, choice in enumerate(spec["choices"]):
            problem = _bad_char(choice)
            if problem:
                raise InvalidCommand(f"{field}.choices[{index}]", problem)
    if "default" in spec:
        try:
            _convert(field, spec, spec["default"])
        except InvalidCommand as exc:
            raise InvalidCommand(f"{field}.default", exc.message) from None


def _validate_entry(name: object, entry: object) -> None:
    if not isinstance(name, str) or not _COMMAND_NAME.fullmatch(name):
        raise InvalidCommand(f"{CONFIG_FIELD}.{name!r}", "command names must match [A-Za-z0-9_.-]+")
    base = f"{CONFIG_FIELD}.{name}"
    if not isinstance(entry, Mapping):
        raise InvalidCommand(base, "must be a mapping")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise InvalidCommand(f"{base}.{sorted(map(str, unknown))[0]}", "unknown key")

    executable = entry.get("executable")
    if not isinstance(executable, str) or not executable:
        raise InvalidCommand(f"{base}.executable", "is required and must be a string")
    if _bad_char(executable):
        raise InvalidCommand(f"{base}.executable", _bad_char(executable) or "")
    if not os.path.isabs(executable):
        raise InvalidCommand(f"{base}.executable", "must be an absolute path")
    if not os.path.isfile(executable):
        raise InvalidCommand(f"{base}.executable", "does not exist or is not a file")
    if not os.access(executable, os.X_OK):
        raise InvalidCommand(f"{base}.executable", "is not executable")

    params = entry.get("params", {})
    if not isinstance(params, Mapping):
        raise InvalidCommand(f"{base}.params", "must be a mapping")
    for pname, spec in params.items():
        if not isinstance(pname, str) or not _PARAM_NAME.fullmatch(pname):
            raise InvalidCommand(f"{base}.params.{pname!r}", "parameter names must be identifiers")
        _validate_param_spec(f"{base}.params.{pname}", spec)

    argv = entry.get("argv")
    if not isinstance(argv, list | tuple):
        raise InvalidCommand(f"{base}.argv", "is required and must be a list")
    after_marker = False
    for index, element in enumerate(argv):
        field = f"{base}.argv[{index}]"
        if not isinstance(element, str):
            raise InvalidCommand(field, "must be a string")
        problem = _bad_char(element)
        if problem:
            raise InvalidCommand(field, problem)
        pname = _placeholder(element)
        if pname is None:
            if "{" in element or "}" in element:
                raise InvalidCommand(
                    field,
                    "must be a literal or exactly one whole '{param}' "
                    "(no partial substitution, format specs or braces)",
                )
            if element == END_OF_OPTIONS:
                after_marker = True
            continue
        if pname not in params:
            raise InvalidCommand(field, f"placeholder {{{pname}}} names no declared parameter")
        if params[pname]["type"] == "str_list" and not after_marker:
            raise InvalidCommand(field, f"str_list parameter {pname!r} may only appear after '--'")

    if "timeout" in entry:
        timeout = entry["timeout"]
        if not _is_number(timeout) or not math.isfinite(timeout) or timeout <= 0:
            raise InvalidCommand(f"{base}.timeout", "must be a positive number")
    if "cwd" in entry:
        cwd = entry["cwd"]
        if not isinstance(cwd, str) or not os.path.isabs(cwd) or _bad_char(cwd):
            raise InvalidCommand(f"{base}.cwd", "must be an absolute path")


def validate_config(config: Mapping) -> None:
    """Check every entry of the allow-list; raise InvalidCommand naming the first bad one."""
    if not isinstance(config, Mapping):
        raise InvalidCommand(CONFIG_FIELD, "must be a mapping")
    for name, entry in config.items():
        _validate_entry(name, entry)


# --------------------------------------------------------------------------------------
# Parameters and argv
# --------------------------------------------------------------------------------------


def _check_str(field: str, spec: Mapping, value: object) -> str:
    return paramspecs.check_str(field, spec, value, InvalidCommand, _bad_char)


def _convert(field: str, spec: Mapping, value: object) -> str | list[str]:
    """Validate ``value`` against ``spec``; return its argv string (a list for str_list)."""
    ptype = spec["type"]
    if ptype == "int":
        return str(paramspecs.check_int(field, spec, value, InvalidCommand))
    if ptype == "str":
        return _check_str(field, spec, value)
    if ptype == "choice":
        return paramspecs.check_choice(field, spec, value, InvalidCommand)
    if ptype == "date":
        if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
            return value.isoformat()
        return paramspecs.check_date(field, value, InvalidCommand)
    if ptype == "str_list":
        items = paramspecs.check_items(field, spec, value, InvalidCommand, what="must be a list of strings")
        return [_check_str(f"{field}[{i}]", spec, item) for i, item in enumerate(items)]
    raise InvalidCommand(f"{field}.type", f"unknown type {ptype!r}")  # pragma: no cover


def _entry(name: object, config: Mapping) -> Mapping:
    if not isinstance(config, Mapping):
        raise InvalidCommand(CONFIG_FIELD, "must be a mapping")
    if not isinstance(name, str) or name not in config:
        raise InvalidCommand("command", "unknown command")
    entry = config[name]
    _validate_entry(name, entry)
    return entry


def _build(name: str, params: Mapping[str, object], config: Mapping) -> tuple[Mapping, list[str]]:
    entry = _entry(name, config)
    specs: Mapping = entry.get("params", {})
    if not isinstance(params, Mapping):
        raise InvalidCommand("params", "must be a mapping")
    for key in params:
        if not isinstance(key, str) or key not in specs:
            raise InvalidCommand(f"params.{key}", "unknown parameter")

    values: dict[str, str | list[str]] = {}
    for pname, spec in specs.items():
        field = f"params.{pname}"
        if pname in params:
            values[pname] = _convert(field, spec, params[pname])
        elif "default" in spec:
            values[pname] = _convert(field, spec, spec["default"])
        else:
            raise InvalidCommand(field, "is required")

    argv: list[str] = []
    after_marker = False
    for element in entry["argv"]:
        pname = _placeholder(element)
        if pname is None:
            argv.append(element)
            if element == END_OF_OPTIONS:
                after_marker = True
            continue
        value = values[pname]
        if isinstance(value, list):  # str_list: validate_config put it after "--"
            argv.extend(value)
            continue
        if not after_marker and value.startswith("-"):
            raise InvalidCommand(f"params.{pname}", "may not start with '-' (it would be read as an option)")
        argv.append(value)
    return entry, argv


def build_argv(name: str, params: Mapping[str, object], config: Mapping) -> list[str]:
    """The argv (without the executable) for command ``name``; raise InvalidCommand if refused."""
    return _build(name, params, config)[1]


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


class CommandNotStarted(RuntimeError):
    """The program could not be started (as the command user): not executable by it, or
    the switch to it refused. Another attempt would meet the same."""


def _check_env(env_extra: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(env_extra, Mapping):
        raise InvalidCommand("env_extra", "must be a mapping")
    env = dict(BASE_ENV)
    for key, value in env_extra.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise InvalidCommand(f"env_extra.{key}", "invalid variable name")
        if not isinstance(value, str) or "\x00" in value or _bad_char(value):
            raise InvalidCommand(f"env_extra.{key}", "value must be a string without control characters")
        env[key] = value
    return env


def _check_run_args(entry: Mapping, timeout, runs_dir, max_output_bytes, max_disk_bytes) -> tuple[float, str | None]:
    """The run's timeout and the entry's own working directory (None: the run's directory)."""
    timeout = entry.get("timeout", timeout)
    cwd = entry.get("cwd")
    if not _is_number(timeout) or not math.isfinite(timeout) or timeout <= 0:
        raise InvalidCommand("timeout", "must be a positive number")
    if not isinstance(runs_dir, str) or not os.path.isabs(runs_dir) or _bad_char(runs_dir):
        raise InvalidCommand("runs_dir", "must be an absolute path")
    if cwd is not None and not os.path.isdir(cwd):
        raise InvalidCommand("cwd", "must be an absolute path to an existing directory")
    if not _is_int(max_output_bytes) or max_output_bytes < 0:
        raise InvalidCommand("max_output_bytes", "must be a non-negative integer")
    if not _is_int(max_disk_bytes) or max_disk_bytes < 1:
        raise InvalidCommand("max_disk_bytes", "must be a positive integer")
    return timeout, cwd


def run_command(
    name: str,
    params: Mapping[str, object],
    *,
    config: Mapping,
    timeout: float,
    runs_dir: str,
    max_output_bytes: int,
    max_disk_bytes: int = MAX_DISK_BYTES,
    user: isolation.CommandUser | None = None,
    env_extra: Mapping[str, str] = _EMPTY,
) -> CommandResult:
    """Run allow-listed command ``name`` with ``params``; a non-zero exit is returned, not raised.

    The program runs in a new directory of its own inside ``runs_dir`` (its working
    directory unless the entry names a ``cwd``; TMPDIR and HOME too), removed afterwards,
    as ``user`` when given (isolation.command_user()), under a supervisor (supervise.py)
    that kills everything the run started when its main process exits or the run is
    stopped: at ``timeout`` (the entry's own ``timeout`` first), or once the run holds more
    than ``max_disk_bytes`` on disk. Raise CommandNotStarted if the program cannot start.
    """
    entry, argv = _build(name, params, config)
    timeout, cwd = _check_run_args(entry, timeout, runs_dir, max_output_bytes, max_disk_bytes)
    env = _check_env(env_extra)
    # Before any child exists: see isolation.make_undumpable() (the worker's start signal
    # does it too, for the main process; here it also covers whoever else runs commands).
    isolation.make_undumpable()
    run_dir = isolation.make_run_directory(runs_dir, user)
    try:
        env.update(TMPDIR=run_dir, HOME=run_dir)
        limits = {
            "RLIMIT_CORE": 0,
            "RLIMIT_NOFILE": RLIMIT_NOFILE,
            "RLIMIT_FSIZE": min(RLIMIT_FSIZE, max_disk_bytes),
            "RLIMIT_CPU": math.ceil(timeout) + 1,
        }
        watched = _Watched(entry["executable"], argv, limits=limits, user=user, cwd=cwd or run_dir, env=env)
        result = watched.watch(time.monotonic() + timeout, run_dir, max_output_bytes, max_disk_bytes)
    finally:
        isolation.remove_run_directory(run_dir)
    if watched.report.get("spawn_error"):
        raise CommandNotStarted(watched.report["spawn_error"])
    return result


class _Watched:
    """One run under its supervisor, watched from the worker: its output (capped), its
    deadline, and what it holds on disk (checked every DISK_CHECK_INTERVAL or so)."""

    def __init__(self, executable: str, argv: list[str], *, limits: dict, user, cwd: str, env: dict) -> None:
        report_r, report_w = os.pipe()
        spec = {
            "executable": executable,
            "argv": argv,
            "limits": limits,
            "status_fd": report_w,
            "user": None if user is None else [user.uid, user.gid],
            "parent": os.getpid(),
        }
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", SUPERVISOR, json.dumps(spec)],
                shell=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                close_fds=True,
                pass_fds=(report_w,),
                start_new_session=True,  # own session and process group: pgid == proc.pid
            )
        except BaseException:
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
        self.report_r = report_r
        self.report: dict = {}
        assert self.proc.stdout is not None and self.proc.stderr is not None  # both subprocess.PIPE
        self.buffers = {self.proc.stdout: bytearray(), self.proc.stderr: bytearray()}
        self.truncated = False
        self.stopped = ""  # "timeout" or "disk" once the worker stopped the run
        self.seen: dict[int, int] = {}  # the run's processes at the latest check

    def watch(self, deadline: float, run_dir: str, max_output_bytes: int, max_disk_bytes: int) -> CommandResult:
        started = time.monotonic()
        try:
            self._pump(deadline, run_dir, max_output_bytes, max_disk_bytes)
        finally:
            self._finish()
        if not self.stopped and isolation.disk_used(run_dir, (), max_disk_bytes) > max_disk_bytes:
            self.stopped = "disk"  # it wrote too much before the first look, and exited
        status = self.report.get("status")
        exit_code = (
            None
            if self.stopped
            else (os.waitstatus_to_exitcode(status) if status is not None else self.proc.returncode)
        )
        stdout, stderr = (bytes(b).decode("utf-8", errors="replace") for b in self.buffers.values())
        return CommandResult(
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            truncated=self.truncated,
            elapsed=time.monotonic() - started,
            timed_out=self.stopped == "timeout",
            disk_exceeded=self.stopped == "disk",
        )

    def _pump(self, deadline: float, run_dir: str, max_output_bytes: int, max_disk_bytes: int) -> None:
        """Read output until the supervisor is done and the pipes are closed, or stop the run."""
        selector = selectors.DefaultSelector()
        next_check = time.monotonic()
        try:
            for stream in self.buffers:
                selector.register(stream, selectors.EVENT_READ)
            while True:
                exited = self.proc.poll() is not None
                if exited and not selector.get_map():
                    return
                now = time.monotonic()
                if now >= deadline:
                    if not exited:
                        self._stop("timeout")
                    return
                if now >= next_check and not exited:
                    if self._holds_more_than(run_dir, max_disk_bytes):
                        self._stop("disk")
                        return
                    next_check = time.monotonic() + max(DISK_CHECK_INTERVAL, 2 * (time.monotonic() - now))
                wait = max(0.0, min(deadline - now, _POLL_INTERVAL, next_check - now))
                for key, _events in selector.select(wait):
                    self._read(selector, key.fileobj, max_output_bytes)
        finally:
            selector.close()

    def _read(self, selector, stream, max_output_bytes: int) -> None:
        chunk = os.read(stream.fileno(), _READ_CHUNK)
        if not chunk:
            selector.unregister(stream)
            return
        buf = self.buffers[stream]
        room = max_output_bytes - len(buf)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        buf += chunk

    def _holds_more_than(self, run_dir: str, limit: int) -> bool:
        self.seen = isolation.descendants(self.proc.pid)
        return isolation.disk_used(run_dir, self.seen, limit) > limit

    def _stop(self, reason: str) -> None:
        """Ask the supervisor to kill the run (SIGTERM); if it has not within STOP_GRACE,
        kill its group and every process last seen below it."""
        self.stopped = self.stopped or reason
        if self.proc.poll() is not None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.seen.update(isolation.descendants(self.proc.pid))
            _killpg(self.proc.pid)  # not yet reaped: its pid is still its group's
        except ProcessLookupError:
            pass

    def _finish(self) -> None:
        if self.proc.poll() is None:  # an exception (a soft time limit): the run goes
            self._stop("")
        for stream in self.buffers:
            stream.close()
        self.proc.wait()
        try:
            raw = b"".join(iter(lambda: os.read(self.report_r, 65536), b""))
        finally:
            os.close(self.report_r)
        try:
            self.report = json.loads(raw) if raw else {}
        except ValueError:  # the supervisor was killed while it wrote
            self.report = {}
        # A command of the worker's own user could have killed its supervisor: whatever
        # was last seen below it goes now (a no-op when the supervisor did its work).
        isolation.kill_survivors(self.seen)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
