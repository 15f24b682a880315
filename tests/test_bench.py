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


def test_bench_ledger_runs_and_leaves_nothing_the_policy_lets_go():
    done = subprocess.run(
        [sys.executable, "manage.py", "bench", "ledger", "--jobs", "200", "--rows", "20000", "--repeat", "1",
         "--load", "20", "--yes"],
        cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=300,
    )

    # Its speed checks may fail on a busy machine at this size (exit status 1); it must not crash.
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("  ledger rows seeded") and "20,000" in line for line in lines), done.stdout
    assert any("left that the policy lets go" in line and line.endswith("ok") for line in lines), done.stdout
    assert "API run list, first page" in done.stdout and "one pruning batch" in done.stdout
