"""The dispatch benchmark still runs and checks itself (a smoke test; its figures are not
asserted: speed is reported by running the benchmark, not by tests)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, process_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_bench_dispatch_runs_and_its_checks_pass():
    done = subprocess.run(
        [sys.executable, "manage.py", "bench", "dispatch", "--jobs", "300", "--beats", "2", "--yes"],
        cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=300,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "runs in ledger == N, all queued" in done.stdout
    assert "fires/s" in done.stdout
    assert " FAIL" not in done.stdout
