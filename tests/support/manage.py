"""`manage.py` run as a child process with the checkout's virtual environment, for the tests
of its start-up errors (test_manage) and of the embedded broker (test_fsbroker)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, environment_with

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def run_manage(*args: str, stdout=subprocess.PIPE, **env: str | None) -> subprocess.CompletedProcess:
    """`.venv/bin/python manage.py ARGS` with `env` over this process's environment (None unsets)."""
    environment = environment_with(**env)
    python = VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable)
    return subprocess.run(
        [python, ROOT / "manage.py", *args],
        cwd=ROOT,
        env=environment,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
