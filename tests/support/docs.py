"""Reading a page's fenced blocks and pasting them into a fresh terminal: shared by the README's
test (test_readme, the real `./demo.sh`) and the walk of every page (test_docs)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO_PORT = "127.0.0.1:8000"
DEMO_HOSTS = ("127.0.0.1:8000", "localhost:8000")

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\n", re.S | re.M)
HEADING = re.compile(r"^(#{2,3}) (.+)$", re.M)


@dataclass(frozen=True)
class Block:
    heading: str  # the nearest heading above it ("" before the first)
    language: str  # the fence's info string's first word ("" for a plain block)
    body: str
    line: int  # of the opening fence, counted from 1


def page_blocks(text: str) -> list[Block]:
    """Every fenced block of a page, in order, under its nearest heading."""
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        headings = HEADING.findall(before)
        found.append(Block(headings[-1][1] if headings else "", match.group(1), match.group(2), before.count("\n") + 1))
    return found


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(heading, language, body) of every fenced block, under its nearest heading."""
    return [(found.heading, found.language, found.body) for found in page_blocks(text)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fresh_env(home: Path, var_dir: Path) -> dict[str, str]:
    """A new terminal: PATH and HOME, and where the demo keeps its data."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "CRONFLEET_VAR_DIR": str(var_dir)}


def at_port(body: str, port: int) -> str:
    """A block's demo address (127.0.0.1:8000 or localhost:8000) moved to the port in use."""
    for host in DEMO_HOSTS:
        body = body.replace(host, f"127.0.0.1:{port}")
    return body


def paste(
    body: str, env: dict[str, str], port: int, cwd: Path = REPO, timeout: float = 180
) -> subprocess.CompletedProcess:
    """Run a block as pasted into a fresh shell, stopping at the first command that fails."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", at_port(body, port)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for_web(port: int, alive: Callable[[], str | None], seconds: float) -> str | None:
    """Wait until /healthz answers on the port; the reason it did not (alive() says why a
    server that exited stopped), or None once it answers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stopped = alive()
        if stopped is not None:
            return stopped
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return None
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    return f"nothing answered on port {port} within {seconds} s"


def shown(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
