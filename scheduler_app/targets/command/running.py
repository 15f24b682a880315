"""Command jobs: run a program named in an allow-list, never through a shell.

No Django imports: the allow-list (later ``settings.CRONFLEET_COMMANDS``) is passed in as
``config``.  One entry looks like::

    "report": {
        "executable": "/usr/bin/python3",      # absolute, existing, executable
        "argv": ["-m", "reports.run", "--day", "{day}", "--", "{paths}"],
        "params": {
            "day": {"type": "date"},
            "paths": {"type": "str_list", "max_items": 10, "max_length": 200},
        },
        "timeout": 60, "cwd": "/tmp",          # optional; override run_command's defaults
    }

Template elements are either literals or exactly one whole ``"{param}"``; each placeholder
becomes exactly ONE argv element (a ``str_list`` becomes one element per item and may only
appear after the literal ``"--"``).  No partial substitution, no format specs.  Values
placed before ``"--"`` may not start with ``-`` (they would be read as options).

The program runs with ``shell=False``, stdin from /dev/null, a minimal environment, its own
session / process group (killed as a whole on timeout, and once the main process has exited
so nothing it started outlives the job), best-effort resource limits, and output capped at
``max_output_bytes`` per stream (the rest is read and discarded).
"""

from __future__ import annotations

import datetime as _dt
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
from types import MappingProxyType

from scheduler_app.targets import params as paramspecs

try:  # not available on every platform
    import resource
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]

CONFIG_FIELD = "CRONFLEET_COMMANDS"
END_OF_OPTIONS = "--"
BASE_ENV = MappingProxyType({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})

RLIMIT_NOFILE = 256
RLIMIT_FSIZE = 64 * 1024 * 1024

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


# The limits are set by a tiny Python program that then execs the command, not by a
# preexec_fn: preexec_fn runs Python between fork and exec, which is unsafe in a process
# with threads (a worker runs a heartbeat thread beside every run). The launcher is a fresh
# single-threaded interpreter, so setting limits there is safe, and exec keeps them.
_LAUNCHER = """
import os, resource, sys
for name, limit in zip(("RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CPU"), map(int, sys.argv[1:5])):
    if hasattr(resource, name):
        res = getattr(resource, name)
        try:
            hard = resource.getrlimit(res)[1]
            value = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
            resource.setrlimit(res, (value, value))
        except (OSError, ValueError):
            pass
os.execv(sys.argv[5], sys.argv[5:])
"""


def _launch_argv(executable: str, argv: list[str], cpu_seconds: int) -> list[str]:
    """[python, launcher, limits..., executable, *argv]: the command with resource limits."""
    if resource is None:  # pragma: no cover (no resource module: no limits)
        return [executable, *argv]
    limits = [0, RLIMIT_NOFILE, RLIMIT_FSIZE, cpu_seconds]
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, *map(str, limits), executable, *argv]


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _has_exited(proc: subprocess.Popen) -> bool:
    """True once the child has exited, WITHOUT reaping it where possible.

    While the child is an unreaped zombie its pid (= its process group id) cannot be
    reused, so a following killpg cannot hit an unrelated group.
    """
    if proc.returncode is not None:
        return True
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # pragma: no cover
        return proc.poll() is not None
    try:
        info = waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped elsewhere
        return True
    return info is not None


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


def run_command(
    name: str,
    params: Mapping[str, object],
    *,
    config: Mapping,
    timeout: float,
    cwd: str,
    max_output_bytes: int,
    env_extra: Mapping[str, str] = _EMPTY,
) -> CommandResult:
    """Run allow-listed command ``name`` with ``params``; a non-zero exit is returned, not raised.

    ``timeout`` and ``cwd`` are defaults, overridden by the entry's own ``timeout``/``cwd``.
    """
    entry, argv = _build(name, params, config)
    timeout = entry.get("timeout", timeout)
    cwd = entry.get("cwd", cwd)
    if not _is_number(timeout) or not math.isfinite(timeout) or timeout <= 0:
        raise InvalidCommand("timeout", "must be a positive number")
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or not os.path.isdir(cwd):
        raise InvalidCommand("cwd", "must be an absolute path to an existing directory")
    if not _is_int(max_output_bytes) or max_output_bytes < 0:
        raise InvalidCommand("max_output_bytes", "must be a non-negative integer")
    env = _check_env(env_extra)

    started = time.monotonic()
    deadline = started + timeout
    proc = subprocess.Popen(
        _launch_argv(entry["executable"], argv, math.ceil(timeout) + 1),
        shell=False,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        close_fds=True,
        start_new_session=True,  # own session and process group: pgid == proc.pid
    )
    buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    truncated = False
    timed_out = False
    selector = selectors.DefaultSelector()
    try:
        for stream in buffers:
            selector.register(stream, selectors.EVENT_READ)
        leader_exited = False
        while True:
            if not leader_exited and _has_exited(proc):
                leader_exited = True
                _killpg(proc.pid)  # anything it left behind; its pipes then reach EOF
            if leader_exited and not selector.get_map():
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = not leader_exited
                break
            for key, _events in selector.select(min(remaining, _POLL_INTERVAL)):
                stream = key.fileobj
                chunk = os.read(stream.fileno(), _READ_CHUNK)
                if not chunk:
                    selector.unregister(stream)
                    continue
                buf = buffers[stream]
                room = max_output_bytes - len(buf)
                if len(chunk) > room:
                    truncated = True
                    chunk = chunk[: max(room, 0)]
                buf += chunk
    finally:
        selector.close()
        if proc.returncode is None:
            _killpg(proc.pid)  # timeout, or an exception: the whole group goes
        for stream in buffers:
            stream.close()
        proc.wait()
    elapsed = time.monotonic() - started

    stdout, stderr = (bytes(b).decode("utf-8", errors="replace") for b in buffers.values())
    return CommandResult(
        exit_code=None if timed_out else proc.returncode,
        stdout=stdout,
        stderr=stderr,
        truncated=truncated,
        elapsed=elapsed,
        timed_out=timed_out,
    )
