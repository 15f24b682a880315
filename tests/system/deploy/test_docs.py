"""Every page works as written: the ```sh blocks of README.md and of each page under docs/,
pasted in the page's order into fresh terminals against the embedded SQLite demo.

The demo is set up as `./demo.sh` sets it up (migrate, then the demo command's tenant `demo`,
its jobs and the admin/admin superuser), once for the session; each page gets its own copy of
that database and a scratch directory whose entries point at the checkout's, so the files a
page writes stay there. Each block runs in `bash -euo pipefail` with only PATH, HOME, LANG and
CRONFLEET_VAR_DIR set: a block exports what it needs (DJANGO_DEBUG=true, as the demo does) and
uses only the names the page creates itself. A page whose blocks call the demo's web server
(127.0.0.1:8000 or localhost:8000) gets one on a free port, the address rewritten to it; no
beat or worker runs. Blocks are run up to the first that fails; the failure names the page
and the line of the block's opening fence.

Which blocks are run (the convention docs/ follows, stated in README's documentation table):
  - a ```sh block is run, unless its first line is a comment starting `# illustrative:`
    followed by the reason (it needs a host project, nginx, root, a second machine,
    PostgreSQL, or it never ends), which readers see and the walk skips;
  - a block that is `./demo.sh` alone is the demo this walk stands up itself;
  - a plain block is output or a transcript (`$ command` lines), never run: a plain block
    that reads like commands to paste (`./manage.py`, `manage.py`, `curl`, `python`) is
    refused, so a command cannot hide from the walk by losing its `sh`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.docs import DEMO_HOSTS, REPO, Block, free_port, fresh_env, page_blocks, paste, shown, wait_for_web

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ILLUSTRATIVE = "# illustrative:"
COMMAND_STARTS = ("./manage.py", "manage.py", "python", "curl ", ".venv/bin/python")
COPIED = {"deploy"}
# A bound per command of a block, to catch a hang: a manage.py call's start-up alone takes
# seconds on a loaded machine, and the README's longest block holds fourteen.
COMMAND_SECONDS = 30
WEB_SECONDS = 60
# Seeds what the demo command seeds before it starts its processes: its tenant and jobs, and
# the superuser its web server announces.
SEED = (
    "from scheduler_app.management.commands.demo import Command\n"
    "demo = Command(stdout=open('/dev/null', 'w'))\n"
    "demo.say = lambda *args, **kwargs: None\n"
    "demo.seed()\n"
    "demo.ensure_superuser(8000)\n"
)


def walked(block: Block) -> bool:
    body = block.body.strip()
    return block.language == "sh" and not body.startswith(ILLUSTRATIVE) and body != "./demo.sh"


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def demo_env(home: Path, var_dir: Path) -> dict[str, str]:
    return {**fresh_env(home, var_dir), "DJANGO_DEBUG": "true"}


@pytest.fixture(scope="module")
def demo_database(tmp_path_factory) -> Path:
    """A var dir holding the demo's database, migrated and seeded once: copied for each page."""
    base = tmp_path_factory.mktemp("demo")
    var_dir, home = base / "var", base / "home"
    home.mkdir()
    env = demo_env(home, var_dir)
    for argv in (["migrate", "--noinput", "-v", "0"], ["shell", "-c", SEED]):
        done = subprocess.run(
            [str(REPO / "manage.py"), *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, shown(done)
    return var_dir


def scratch(root: Path) -> Path:
    """A working directory whose entries point at the checkout's (its var/ and git data left
    out), but for deploy/, copied: a page writes its example files there."""
    work = root / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name in COPIED:
            shutil.copytree(entry, work / entry.name, symlinks=True)
        elif entry.name not in {"var", ".git"}:
            (work / entry.name).symlink_to(entry)
    return work


def start_web(work: Path, env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            ["./manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


# The pages with a block to walk (the others give nothing to run, so no test of their own).
WALKED_PAGES = [page for page in PAGES if any(walked(block) for block in page_blocks(page.read_text()))]


@pytest.mark.parametrize("page", WALKED_PAGES, ids=page_id)
def test_the_pages_blocks_run_as_written(page, demo_database, tmp_path):
    runnable = [block for block in page_blocks(page.read_text()) if walked(block)]
    home, var_dir = tmp_path / "home", tmp_path / "var"
    home.mkdir()
    shutil.copytree(demo_database, var_dir)
    work = scratch(tmp_path)
    env = {**fresh_env(home, var_dir)}
    port = free_port()
    web = None
    if any(host in block.body for block in runnable for host in DEMO_HOSTS):
        log = tmp_path / "web.log"
        web = start_web(work, demo_env(home, var_dir), port, log)
        stopped = wait_for_web(
            port, lambda: None if web.poll() is None else f"exited with {web.returncode}", WEB_SECONDS
        )
        if stopped is not None:
            stop(web)
            pytest.fail(f"the demo's web server: {stopped}:\n{log.read_text()}")
    try:
        for block in runnable:
            result = paste(block.body, env, port, cwd=work, timeout=COMMAND_SECONDS * commands_in(block.body))
            where = f"{page_id(page)}:{block.line} (under {block.heading!r})"
            assert result.returncode == 0, f"{where}\n{block.body}\n{shown(result)}"
            assert "Traceback" not in result.stderr, f"{where}\n{block.body}\n{shown(result)}"
    finally:
        if web is not None:
            stop(web)


def commands_in(body: str) -> int:
    """How many commands a block runs: its lines that are not blank, a comment or the
    continuation of a line ending in a backslash (at least one)."""
    count, continued = 0, False
    for line in body.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not continued:
            count += 1
        continued = stripped.endswith("\\")
    return max(count, 1)


def pasteable(block: Block) -> bool:
    lines = [line for line in block.body.splitlines() if line.strip()]
    return bool(lines) and not lines[0].startswith("$") and lines[0].startswith(COMMAND_STARTS)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_commands_to_paste_are_in_sh_blocks(page):
    hidden = [
        f"{page_id(page)}:{block.line}"
        for block in page_blocks(page.read_text())
        if not block.language and pasteable(block)
    ]
    assert hidden == [], "commands in a plain block: make it ```sh (run, or `# illustrative: why` first)"
