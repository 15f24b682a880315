"""The README's blocks, run as a new user runs them: `./demo.sh` on the embedded SQLite
database, then the command-line and REST blocks, each pasted into a fresh shell that has
only PATH and HOME (the demo's own variables are not inherited), and the bad-input examples
compared with what the commands print.

The demo serves on a free port instead of 8000 (the blocks' `127.0.0.1:8000` is rewritten to
it) and keeps its data in a temporary CRONFLEET_VAR_DIR; nothing else in a block is changed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
DEMO_PORT = "127.0.0.1:8000"
START_SECONDS = 180  # demo.sh checks the venv, migrates and starts web, beat and worker
BLOCK_SECONDS = 180

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
HEADING = re.compile(r"^(#{2,3}) (.+)$", re.M)


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(heading, language, body) of every fenced block, under its nearest heading."""
    found = []
    for match in FENCE.finditer(text):
        headings = HEADING.findall(text[: match.start()])
        found.append((headings[-1][1] if headings else "", match.group(1), match.group(2)))
    return found


def block(heading: str, language: str = "sh") -> str:
    bodies = [body for head, lang, body in blocks(README.read_text()) if head == heading and lang == language]
    assert len(bodies) == 1, f"README: expected one ```{language} block under {heading!r}, found {len(bodies)}"
    return bodies[0]


def examples(heading: str) -> list[tuple[str, str]]:
    """The `$ command` / output pairs of the plain blocks under a heading."""
    pairs = []
    for head, lang, body in blocks(README.read_text()):
        if head != heading or lang:
            continue
        for chunk in re.split(r"^\$ ", body, flags=re.M)[1:]:
            command, _, output = chunk.partition("\n")
            pairs.append((command, output.strip()))
    return pairs


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fresh_env(home: Path, var_dir: Path) -> dict[str, str]:
    """A new terminal: PATH and HOME, and where the demo keeps its data."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "CRONFLEET_VAR_DIR": str(var_dir)}


def paste(body: str, env: dict[str, str], port: int) -> subprocess.CompletedProcess:
    """Run a block as pasted, stopping at the first command that fails."""
    script = "set -e -o pipefail\n" + body.replace(DEMO_PORT, f"127.0.0.1:{port}")
    return subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=BLOCK_SECONDS
    )


def wait_for_web(port: int, demo: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        assert demo.poll() is None, f"./demo.sh exited with {demo.returncode}:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    pytest.fail(f"./demo.sh did not answer on port {port} within {START_SECONDS} s:\n{log.read_text()}")


@pytest.fixture
def demo(tmp_path):
    """`./demo.sh --port <free>` as the README's first command, in a fresh environment."""
    assert block("Try it").strip() == "./demo.sh"
    home, var_dir = tmp_path / "home", tmp_path / "var"
    home.mkdir()
    env = fresh_env(home, var_dir)
    port = free_port()
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["./demo.sh", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_for_web(port, process, log)
        yield env, port, log
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def json_documents(text: str, context: str) -> list:
    decoder, documents, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        try:
            document, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            pytest.fail(f"the REST block printed something other than JSON at {text[at : at + 80]!r}:\n{context}")
        documents.append(document)
    return documents


def shown(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


@pytest.mark.slow
def test_the_readme_blocks_work_as_written_in_fresh_terminals(demo):
    env, port, log = demo

    cli = paste(block("The command line"), env, port)
    assert cli.returncode == 0, shown(cli)
    assert "Traceback" not in cli.stderr, shown(cli)
    assert "acme/nightly" in cli.stdout and "acme/pulse" in cli.stdout, shown(cli)

    # The examples continue the command-line block's terminal: its exports, then the command.
    exports = "".join(line + "\n" for line in block("The command line").splitlines() if line.startswith("export "))
    for command, expected in examples("The command line"):
        result = subprocess.run(
            ["bash", "-c", exports + command], cwd=REPO, env=env, capture_output=True, text=True, timeout=BLOCK_SECONDS
        )
        assert result.returncode == 2, f"$ {command}\n{shown(result)}"
        assert (result.stdout + result.stderr).strip() == expected, f"$ {command}\n{shown(result)}"

    rest = paste(block("The REST API"), env, port)
    assert rest.returncode == 0, shown(rest)
    assert "Traceback" not in rest.stderr, shown(rest)
    # Every curl answered with data, none with an error: the job, its previews, the trigger
    # and its runs, one JSON document each (curl adds no newline between them).
    documents = json_documents(rest.stdout, shown(rest))
    assert len(documents) == 5, shown(rest)
    for document in documents:
        assert not {"errors", "detail"} & set(document if isinstance(document, dict) else {}), shown(rest)
    created, preview, any_preview, triggered, runs = documents
    assert created["name"] == "from-curl"
    assert len(preview["fires"]) == 3 and len(any_preview["fires"]) == 3, shown(rest)
    assert runs["results"] and runs["results"][0]["trigger"] == "manual", shown(rest)
    assert "Traceback" not in log.read_text()
