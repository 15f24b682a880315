"""The supervisor of one command run: started by running.py as its own program
(`python -I -S supervise.py SPEC`), standard library only, a single thread.

Why a program of its own, between the worker and the command:

- It is the run's child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process the command
  starts that detaches (`setsid`, a double fork) is re-parented to the supervisor when its
  parent exits, not to init, so nothing the run started can leave the run. When the
  command's main process exits, or the worker sends SIGTERM (the deadline, the disk bound,
  the worker itself stopping), the supervisor kills its children until it has none left:
  every descendant ends up its child, so none survives.
- It keeps the worker's user while the command runs as CRONFLEET_COMMAND_USER (it switches
  in the forked child, before execve), so the command can neither signal nor trace it.
- The resource limits and the switch happen here, in a fresh single-threaded process
  rather than in a preexec_fn between fork and exec in the worker, which has threads.
- If the worker dies (its hard time limit), PR_SET_PDEATHSIG turns that into a SIGTERM
  here, and the run is killed as at a deadline.

SPEC (JSON): executable, argv, limits {RLIMIT_name: value}, user [uid, gid] or null,
status_fd (where the report goes) and parent (the worker's pid). The report, written once
everything is dead: {"status": wait status of the main process or null, "stopped": bool,
"spawn_error": why the command could not start, or "", "subreaper": bool}.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


class Stop(Exception):
    """SIGTERM: the worker wants the run over."""


def _stop(signum, frame):
    raise Stop


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _exec_command(spec: dict, errors: int) -> None:
    """In the forked child: own process group, limits, the user switch, then the program.
    Anything that goes wrong is written to `errors` and the child exits 127; it never runs
    the program as the worker's user when a user was asked for."""
    try:
        for signum in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)  # Python ignores SIGPIPE and SIGXFSZ
        os.setpgid(0, 0)
        for name, limit in spec["limits"].items():
            res = getattr(resource, name, None)
            if res is not None:
                hard = resource.getrlimit(res)[1]
                value = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
                resource.setrlimit(res, (value, value))
        if spec["user"] is not None:
            uid, gid = spec["user"]
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
                raise PermissionError(f"the switch to uid {uid} did not take")
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the switch, which clears it
        os.execv(spec["executable"], [spec["executable"], *spec["argv"]])
    except BaseException as exc:  # noqa: BLE001 - reported, then the child exits
        os.write(errors, f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:4000])
    os._exit(127)


def _children() -> list[int]:
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if int(data[data.rindex(b")") + 2 :].split()[1]) == me:
                found.append(int(name))
    return found


def _wait_for(pid: int) -> int:
    """Reap children until `pid` exits (orphans re-parented to us die too); its wait status.
    Its process group is killed while it is still an unreaped zombie (its pid, the group's
    id, cannot be reused yet)."""
    while True:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        if info is not None and info.si_pid == pid:
            _killpg(pid)
            return os.waitpid(pid, 0)[1]
        if info is not None:
            os.waitpid(info.si_pid, 0)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_all() -> None:
    """SIGKILL our children and reap them until there are none: as their subreaper we get
    each one's children when it dies, so no children left means no descendants left."""
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    report_fd = spec["status_fd"]
    os.set_inheritable(report_fd, False)
    signal.signal(signal.SIGTERM, _stop)
    report: dict[str, object] = {"status": None, "stopped": False, "spawn_error": "", "subreaper": False}
    errors_w: int | None
    errors_r, errors_w = os.pipe()  # close-on-exec: EOF once the program started
    pid = None
    try:
        _prctl(PR_SET_DUMPABLE, 0)  # a command of our own user cannot trace us
        report["subreaper"] = _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != spec["parent"]:  # the worker died before that took
            raise Stop
        pid = os.fork()
        if pid == 0:
            _exec_command(spec, errors_w)
        os.close(errors_w)
        errors_w = None
        report["status"] = _wait_for(pid)
    except Stop:
        report["stopped"] = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if errors_w is not None:  # stopped before the fork was done with
        try:
            os.close(errors_w)
        except OSError:
            pass
    if pid and report["status"] is None:
        _killpg(pid)  # still running: its group first, then every other descendant
    _kill_all()
    report["spawn_error"] = os.read(errors_r, 4096).decode("utf-8", "replace")
    os.write(report_fd, json.dumps(report).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
