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
import subprocess

import pytest

from tests.support.docs import REPO, blocks, free_port, fresh_env, paste, shown, wait_for_web

README = REPO / "README.md"
START_SECONDS = 180  # demo.sh checks the venv, migrates and starts web, beat and worker
BLOCK_SECONDS = 180


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
        stopped = wait_for_web(
            port, lambda: None if process.poll() is None else f"exited with {process.returncode}", START_SECONDS
        )
        if stopped is not None:
            pytest.fail(f"./demo.sh: {stopped}:\n{log.read_text()}")
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
