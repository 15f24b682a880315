"""What every private server of the tests needs: free ports, the process tree, logs, commands."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT = 60  # seconds for a server to answer after it is started
LOG_TAIL_LINES = 40


class ServerError(RuntimeError):
    """A private server did not start, restart or stop; the message ends with its log's tail."""


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now (the kernel's pick).
    Another program could take it before the server binds it; the server then fails to
    start and says so, which is rare enough not to retry."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def process_states() -> dict[int, tuple[str, int]]:
    """Every process's (state, parent pid), from /proc."""
    states = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue  # gone meanwhile
        states[int(stat.parent.name)] = (state, int(parent))
    return states


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid`: not those that have exited (zombies until
    their parent reaps them)."""
    return [child for child, (state, parent) in process_states().items() if parent == pid and state != "Z"]


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped, does not)."""
    state = process_states().get(pid)
    return state is not None and state[0] != "Z"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The end of a server's log, for the error that says why it did not start."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run(argv: list[str], *, log: Path, what: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Run a server's control program; on failure raise with its output and the server's log."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=timeout, **kwargs)
    except subprocess.CalledProcessError as exc:
        raise ServerError(f"{what} failed ({' '.join(argv)}): {exc.stdout}{exc.stderr}\n{log_tail(log)}") from None
    except subprocess.TimeoutExpired:
        raise ServerError(f"{what} did not finish within {timeout}s ({' '.join(argv)})\n{log_tail(log)}") from None


def descendants_of(pid: int) -> list[int]:
    """`pid`'s live children, theirs, and so on. A RabbitMQ node's helpers (erl_child_setup,
    inet_gethost) run in sessions of their own, so a signal to the node's process group
    misses them."""
    states = process_states()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, (state, ppid) in states.items() if ppid == parent and state != "Z"]
        found.extend(children)
        frontier.extend(children)
    return found
