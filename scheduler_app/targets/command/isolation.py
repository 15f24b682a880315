"""What keeps a command job away from its worker, and inside its bounds. No Django: the
worker's settings are passed in. docs/targets-command.md says what is isolated and what is not.

Each defence, and what it is there for:

- make_undumpable(): a program running as the worker's own user could otherwise read the
  worker's /proc/<pid>/environ and /proc/<pid>/mem (DJANGO_SECRET_KEY, DATABASE_URL, the
  broker URL) or ptrace it.
- command_user(): commands run as a separate unprivileged user (CRONFLEET_COMMAND_USER), so
  the kernel's ordinary permissions keep them out of the worker's processes and files.
- make_run_directory() / disk_used(): each run writes into a private directory of its own,
  whose total size the runner checks, since RLIMIT_FSIZE bounds each file, not their sum.
- descendants() / kill_survivors(): the processes of a run, seen from the worker, so what
  escaped its supervisor (supervise.py) can still be killed.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import re
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4

# What a worker needs to run commands as another user: switch (SETUID, SETGID), give the
# run its directory (CHOWN), kill the user's processes (KILL), and measure and remove what
# the run left whatever its modes (DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER).
NEEDED_CAPABILITIES = {
    "CAP_CHOWN": 0,
    "CAP_DAC_OVERRIDE": 1,
    "CAP_DAC_READ_SEARCH": 2,
    "CAP_FOWNER": 3,
    "CAP_KILL": 5,
    "CAP_SETGID": 6,
    "CAP_SETUID": 7,
}
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*[$]?")
BLOCK = 4096  # the least a file or directory costs on disk (and so the most files a bound allows)


class CommandUserError(ValueError):
    """Commands cannot run as CRONFLEET_COMMAND_USER: no such user, a privileged one, or a
    worker that cannot switch to it. Never answered by running as the worker instead."""


@dataclass(frozen=True)
class CommandUser:
    name: str
    uid: int
    gid: int


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover (no C library to load)
        return None


def make_undumpable() -> bool:
    """Mark this process non-dumpable (prctl PR_SET_DUMPABLE 0); True if it now is.

    Why: without CRONFLEET_COMMAND_USER a command runs as the worker's user, and the kernel
    lets any process of a user read /proc/<pid>/environ and /proc/<pid>/mem of that user's
    other processes, and ptrace them: the worker's environment holds DJANGO_SECRET_KEY,
    DATABASE_URL, CRONFLEET_SQL_DATABASES and the broker URL. A non-dumpable process's /proc
    files belong to root, and ptrace access to it needs CAP_SYS_PTRACE. The flag is
    inherited by fork (Celery's pool processes get the main process's) and reset by execve
    (commands and their supervisor start dumpable: they hold no secret). The price: the
    worker leaves no core dump, and a debugger (py-spy, gdb) needs root. Linux only.
    """
    if not sys.platform.startswith("linux"):  # pragma: no cover
        return False
    libc = _libc()
    if libc is None or not hasattr(libc, "prctl"):  # pragma: no cover
        return False
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def missing_capabilities() -> list[str]:
    """The capabilities of NEEDED_CAPABILITIES this process cannot hand to a command's
    supervisor: not effective here, or (unless we are root, to whom execve gives them back)
    not ambient, since the supervisor is a new program."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        effective, ambient = int(fields["CapEff"], 16), int(fields.get("CapAmb", "0"), 16)
    except (OSError, KeyError, ValueError):
        return ["capabilities (/proc/self/status is unreadable: Linux only)"]
    held = effective if os.geteuid() == 0 else effective & ambient
    return [name for name, bit in NEEDED_CAPABILITIES.items() if not held >> bit & 1]


def check_user_name(name: object) -> None:
    """The shape of CRONFLEET_COMMAND_USER, for every process at start-up (the web and the
    beat too, which may not have the user): a user name, never root. That the user exists
    and the worker can switch to it is checked where commands run (command_user())."""
    if not isinstance(name, str) or (name and not _USER_NAME.fullmatch(name)):
        raise CommandUserError(f"{name!r} is not a user name")
    if name == "root":
        raise CommandUserError("commands may not run as root")


def command_user(name: str) -> CommandUser | None:
    """The user commands run as (CRONFLEET_COMMAND_USER), checked; None when the setting is
    empty (commands then run as the worker's user, see make_undumpable()).

    Raise CommandUserError when there is no such user, when it is privileged (uid or
    group 0) or the worker's own, or when this process cannot switch to it.
    """
    if not name:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise CommandUserError(
            f"there is no user {name!r} (make one: useradd --system --no-create-home {name})"
        ) from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise CommandUserError(f"user {name!r} is privileged (uid or group 0); commands need an unprivileged user")
    if entry.pw_uid == os.geteuid():
        raise CommandUserError(f"user {name!r} is the worker's own user: commands would run as the worker")
    missing = missing_capabilities()
    if missing:
        raise CommandUserError(
            f"the worker (uid {os.geteuid()}) cannot run commands as {name!r}: it lacks {', '.join(missing)}; "
            "run the worker as root, or leave CRONFLEET_COMMAND_USER empty"
        )
    return CommandUser(name, entry.pw_uid, entry.pw_gid)


def make_run_directory(parent: str, user: CommandUser | None) -> str:
    """A new private directory for one run (mode 0700, the command user's) in `parent`.

    Why: it is the run's working directory, TMPDIR and HOME, and what disk_used() measures.
    `parent` stays the worker's and must not be writable by the command user, who can then
    write nowhere of the worker's (`dd of=../../x` is refused by the kernel).
    """
    os.makedirs(parent, mode=0o755, exist_ok=True)
    if user is not None:
        info = os.stat(parent)
        if info.st_uid == user.uid or info.st_mode & 0o002 or (info.st_gid == user.gid and info.st_mode & 0o020):
            raise CommandUserError(
                f"{parent} (CRONFLEET_COMMAND_CWD) is writable by {user.name!r}: its runs could write outside their "
                "directories"
            )
    path = tempfile.mkdtemp(prefix="run-", dir=parent)
    if user is not None:  # by descriptor, never by a name someone could swap for a link
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchown(fd, user.uid, user.gid)
        finally:
            os.close(fd)
    return path


def remove_run_directory(path: str) -> None:
    """Remove a run's directory and whatever it left, also where it took away our write or
    search permission (a worker without CAP_DAC_OVERRIDE: the same user)."""

    def allow_and_retry(func, failed, *_exc) -> None:
        try:
            os.chmod(os.path.dirname(failed), 0o700)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
            func(failed)
        except OSError:
            pass

    if sys.version_info >= (3, 12):  # pragma: no cover (onerror is deprecated there)
        shutil.rmtree(path, onexc=allow_and_retry)
    else:
        shutil.rmtree(path, onerror=allow_and_retry)


def _footprint(info: os.stat_result) -> int:
    """What a file costs: its size or its blocks, whichever is more (a sparse file counts
    at its size), and at least a block (a flood of empty files is bounded too)."""
    return max(info.st_size, info.st_blocks * 512, BLOCK)


def disk_used(path: str, pids: Iterable[int], limit: int) -> int:
    """The bytes a run holds: every file and directory under `path` (symbolic links not
    followed, hard links once), plus the files its processes `pids` hold open after
    deleting them (else `open; unlink; write` would escape the count). Counting stops once
    past `limit`; a directory of the run we cannot read counts as past it."""
    seen: set[tuple[int, int]] = set()
    total, pending = 0, [path]
    while pending and total <= limit:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if (info.st_dev, info.st_ino) not in seen:
                        seen.add((info.st_dev, info.st_ino))
                        total += _footprint(info)
                        if stat.S_ISDIR(info.st_mode):
                            pending.append(entry.path)
        except FileNotFoundError:
            continue
        except OSError:  # the run hid a directory from us
            return limit + 1
    for pid in pids:
        if total > limit:
            break
        total += _deleted_open_files(pid, seen)
    return total


def _deleted_open_files(pid: int, seen: set[tuple[int, int]]) -> int:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone, or not ours to look at
        return 0
    total = 0
    for fd in fds:
        try:
            info = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 0 and (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += _footprint(info)
    return total


def _stat_fields(pid: str) -> list[bytes] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, ... starttime [19]."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()


def descendants(root: int) -> dict[int, int]:
    """The processes below `root` now, pid -> start time (so a reused pid is told apart)."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # pragma: no cover (no /proc)
        return {}
    for name in names:
        fields = _stat_fields(name)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(name))
            started[int(name)] = int(fields[19])
    found: dict[int, int] = {}
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in found:
                found[child] = started[child]
                pending.append(child)
    return found


def kill_survivors(seen: Mapping[int, int]) -> None:
    """SIGKILL each process of `seen` (pid -> start time) still running as the same process.

    Why: the supervisor kills a run's processes itself, but a command running as the
    worker's user can kill its supervisor first; what the worker last saw below it goes then.
    """
    for pid, started in seen.items():
        fields = _stat_fields(str(pid))
        if fields is not None and int(fields[19]) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
