"""The embedded broker (scheduler_app.fsbroker): a reader never takes a message half-written.

A writer process puts large messages while this process takes them as fast as it can, as a
worker polls the folder beside a beat. kombu's own filesystem channel hands out the file of a
message still being written (an empty or short body: `JSONDecodeError`); this one must hand
out every message whole, each once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from queue import Empty

from tests.conftest import ROOT
from tests.support.fsbroker_writer import connection
from tests.support.manage import run_manage

MESSAGES = 300
BODY = "x" * 2_000_000  # large enough that writing one takes a while


WRITER = f"""
import sys
from pathlib import Path
from tests.support.fsbroker_writer import put_all
put_all(Path(sys.argv[1]), {MESSAGES}, {len(BODY)})
"""


def test_a_reader_takes_each_message_whole_while_a_writer_puts(tmp_path):
    (tmp_path / "control").mkdir()
    taken: list[int] = []
    with connection(tmp_path) as conn:
        channel = conn.default_channel
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=ROOT)
        deadline = time.monotonic() + 120
        while len(taken) < MESSAGES and time.monotonic() < deadline:
            try:
                message = channel._get("q")
            except Empty:
                continue
            assert message["body"] == BODY, f"message {message['n']} was taken before it was whole"
            taken.append(message["n"])
    assert writer.wait(timeout=30) == 0
    assert sorted(taken) == list(range(MESSAGES))
    assert not list(tmp_path.glob("*.msg*"))  # nothing left behind, no partial file


def test_the_embedded_brokers_connections_use_it(tmp_path):
    shown = run_manage(
        "shell",
        "-c",
        "from project.celery import app; print(type(app.connection_for_write().transport).__module__)",
        CELERY_BROKER_URL="filesystem://",
        CRONFLEET_VAR_DIR=str(tmp_path),
        DJANGO_DEBUG="true",
    )

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == "scheduler_app.fsbroker"
