"""`./manage.py` as the README writes it: run by a Python without Django, it runs again with
the checkout's virtual environment; start-up errors are one line naming the variable, and a
reader that goes away ends a command quietly. The README's own commands are checked in
tests/unit/deploy/test_manage.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.manage import run_manage

# The interpreter the virtual environment was made from: it has no Django of its own (and
# with -S, no site-packages at all).
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"
pytestmark = pytest.mark.skipif(not BASE_PYTHON.exists(), reason="no base interpreter beside the venv")


def test_manage_py_runs_again_with_the_venv_python_when_django_is_missing(tmp_path):
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")
    fake = tmp_path / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\necho "venv python: $*"\n')
    fake.chmod(0o755)

    done = subprocess.run(
        [BASE_PYTHON, "-S", tmp_path / "manage.py", "jobs", "list", "--limit", "5"],
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"venv python: {tmp_path / 'manage.py'} jobs list --limit 5\n"


def test_manage_py_without_django_or_venv_says_how_to_make_one(tmp_path):
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")

    done = subprocess.run(
        [BASE_PYTHON, "-S", tmp_path / "manage.py", "check"], capture_output=True, text=True, timeout=30
    )

    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("manage.py: No module named 'django' (using ")
    assert "./demo.sh" in done.stderr and "python3 -m venv .venv" in done.stderr


def test_dot_slash_manage_py_works_from_a_shell_whose_python3_has_no_django():
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(
        [str(BASE_PYTHON.parent), *(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)]
    )
    env = {**os.environ, "PATH": path, "DJANGO_SETTINGS_MODULE": "project.settings"}
    env.pop("VIRTUAL_ENV", None)

    done = subprocess.run(
        ["./manage.py", "help", "jobs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: manage.py jobs ")


# --- Start-up errors: one line naming the variable, never a traceback ---------------------------
# (run_manage: tests/support/manage.py)


def assert_one_line(done: subprocess.CompletedProcess, status: int, *words: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("manage.py: "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert done.returncode == status, (done.returncode, done.stderr)


@pytest.mark.parametrize("command", [["apikeys", "add", "--tenant", "demo", "--name", "x"], ["migrate"], ["check"]])
def test_a_missing_secret_key_is_one_line_naming_it_for_every_command(command):
    done = run_manage(*command, DJANGO_SECRET_KEY=None, DJANGO_DEBUG=None)

    assert_one_line(done, 2, "DJANGO_SECRET_KEY", "DJANGO_DEBUG=true")


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DJANGO_DEBUG": "perhaps"}, ["DJANGO_DEBUG must be a boolean"]),
        ({"CRONFLEET_BATCH_SIZE": "many"}, ["CRONFLEET_BATCH_SIZE must be an integer"]),
        ({"DJANGO_CSRF_TRUSTED_ORIGINS": "cron.example.com"}, ["DJANGO_CSRF_TRUSTED_ORIGINS"]),
        ({"DATABASE_URL": "nosuchdb://x"}, ["DATABASE_URL"]),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(env, words):
    done = run_manage("jobs", "list", **env)

    assert_one_line(done, 2, *words)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        # Nothing listens on port 1.
        ("postgres://postgres@127.0.0.1:1/cronfleet", ["DATABASE_URL", "127.0.0.1:1/cronfleet", "refused"]),
        ("postgres://postgres:sesame@127.0.0.1:1/cronfleet", ["DATABASE_URL"]),
    ],
)
def test_migrate_against_a_database_server_that_is_down_is_one_line(url, words):
    done = run_manage("migrate", "--noinput", DATABASE_URL=url, DJANGO_DEBUG="true", DB_CONNECT_TIMEOUT="2")

    assert_one_line(done, 1, *words)
    assert "sesame" not in done.stderr


def test_migrate_against_a_database_that_does_not_exist_is_one_line():
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("needs the PostgreSQL server the tests use")
    url = f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/no_such_database_xyz"

    done = run_manage("migrate", "--noinput", DATABASE_URL=url, DJANGO_DEBUG="true")

    assert_one_line(done, 1, "DATABASE_URL", "no_such_database_xyz", "does not exist")


@pytest.mark.parametrize("command", [["help"], ["diffsettings"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(command):
    """`./manage.py jobs show JOB | head -1`: the pipe's reader is gone before the output is
    written (here it is closed before the command starts), and no BrokenPipeError is printed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = run_manage(*command, stdout=write_end, DJANGO_DEBUG="true")
    finally:
        os.close(write_end)

    assert done.stderr == ""
    assert done.returncode == 1  # manage.py's status when its output's reader went away


def test_jobs_show_piped_into_head_ends_quietly(tmp_path):
    """The case from the issue, on a SQLite database of its own: `jobs show 1 | head -1`."""
    env = {
        "DJANGO_DEBUG": "true",
        "CRONFLEET_VAR_DIR": str(tmp_path),
        "CELERY_BROKER_URL": "memory://",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    for command in (
        ["migrate", "-v", "0"],
        ["tenants", "add", "demo"],
        ["jobs", "add", "--tenant", "demo", "--name", "nightly", "--cron", "0 3 * * *", "--task", "scheduler_app.echo"],
    ):
        assert run_manage(*command, **env).returncode == 0, command
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = run_manage("jobs", "show", "1", stdout=write_end, **env)
    finally:
        os.close(write_end)

    assert done.stderr == ""
    assert done.returncode == 1
