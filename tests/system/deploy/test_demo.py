"""`manage.py demo` end to end: embedded SQLite + filesystem broker, beat, worker, Ctrl-C.

Runs real processes against a throwaway CRONFLEET_VAR_DIR (tests/support/embedded.py's
environment); needs no PostgreSQL or Redis. The demo's run lines are tested in
tests/unit/deploy/test_demo.py.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from tests.conftest import ROOT as REPO
from tests.support.embedded import embedded_env

STARTUP_SECONDS = 60  # until the first succeeded run is printed
# flaky dies every 20 s (after two retries); the beat checks the alert rules every 10 s.
ALERT_SECONDS = 90
STOP_SECONDS = 30  # from SIGINT to exit (the demo gives its children 10 s, then kills them)

STARTED = re.compile(r"^demo: started (\w+) +\(pid (\d+)\)")
SUCCEEDED_RUN = re.compile(r"^\d\d:\d\d:\d\d UTC  heartbeat +\d\d:\d\d:\d\d UTC  succeeded +1  ")


def process_groups_alive(pgids: set[int]) -> list[str]:
    """`ps` lines of live processes in any of these process groups (each child leads one)."""
    out = subprocess.run(
        ["ps", "-e", "-o", "pid=,pgid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    alive = []
    for line in out.splitlines():
        pid, pgid, stat, *_ = line.split(None, 3)
        if int(pgid) in pgids and not stat.startswith("Z"):
            alive.append(line.strip())
    return alive


def wait_for_an_alert(database: Path, seconds: float) -> list[tuple]:
    """The alerts recorded in the demo's SQLite file, once there is one (or [] after `seconds`)."""
    deadline = time.monotonic() + seconds
    while True:
        with closing(sqlite3.connect(database, timeout=10)) as db:
            raised = db.execute("SELECT kind, message FROM scheduler_app_alert ORDER BY id").fetchall()
        if raised or time.monotonic() > deadline:
            return raised
        time.sleep(0.5)


@pytest.mark.slow
def test_demo_runs_jobs_and_stops_cleanly_on_sigint(tmp_path):
    env = embedded_env(tmp_path)
    manage = str(REPO / "manage.py")
    migrate = subprocess.run(
        [sys.executable, manage, "migrate", "--noinput", "-v", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr

    demo = subprocess.Popen(
        [sys.executable, manage, "demo", "--no-web"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in demo.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    output: list[str] = []
    children: dict[str, int] = {}
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        succeeded = False
        while not succeeded:
            left = deadline - time.monotonic()
            assert left > 0, "no succeeded run within {}s:\n{}".format(STARTUP_SECONDS, "\n".join(output))
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, "demo exited early (code {}):\n{}".format(demo.poll(), "\n".join(output))
            output.append(line)
            if started := STARTED.match(line):
                children[started[1]] = int(started[2])
            succeeded = bool(SUCCEEDED_RUN.match(line))
        assert set(children) == {"beat", "worker"}, children  # --no-web: no runserver
        rule = subprocess.run(
            [sys.executable, manage, "alerts", "set", "demo/flaky", "--on-failure"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert rule.returncode == 0, rule.stderr
        raised = wait_for_an_alert(tmp_path / "cronfleet.sqlite3", ALERT_SECONDS)
        assert raised and raised[0][0] == "failed", raised

        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=STOP_SECONDS)
    finally:
        if demo.poll() is None:  # the test failed: do not leave the demo behind
            demo.kill()
            demo.wait()
        leftovers = process_groups_alive(set(children.values()))
        for pgid in children.values() if leftovers else ():  # nor its children
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    reader.join(timeout=5)
    while not lines.empty():
        line = lines.get_nowait()
        if line is not None:
            output.append(line)
    text = "\n".join(output)

    assert code == 0, text
    assert "demo: stopped" in text
    assert "unexpectedly" not in text
    assert "database is locked" not in text
    assert "beat turn failed" not in text
    assert leftovers == [], text
