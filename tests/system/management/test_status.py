"""manage.py status --watch in a real process: it prints again and again until interrupted
(the figures it prints are tested in tests/integration/management/test_status.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, process_env


@pytest.mark.django_db(transaction=True)
def test_status_watch_prints_again_until_interrupted():
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "status", "--json", "--watch", "0.2"],
        cwd=ROOT,
        env=process_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first, second = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    assert first["at"] < second["at"]
