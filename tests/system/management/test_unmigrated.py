"""Every command on a database never migrated (an empty SQLite file, as a first run without
`migrate` has) says so in one line naming `./manage.py migrate` and exits 1: no traceback,
and no beat retrying a missing table for ever."""

from __future__ import annotations

import pytest

from tests.support.manage import run_manage

NO_TABLES = "the database has no Cronfleet tables: run ./manage.py migrate"
COMMANDS = [
    ("jobs", "list"),
    ("jobs", "add", "--tenant", "acme", "--name", "x", "--every", "60", "--task", "scheduler_app.echo"),
    ("tenants", "list"),
    ("tenants", "add", "acme", "--name", "Acme"),
    ("windows", "list"),
    ("calendars", "list", "--tenant", "acme"),
    ("alerts", "list"),
    ("apikeys", "add", "--tenant", "acme"),
    ("retention", "show", "--tenant", "acme"),
    ("prune_runs", "--dry-run"),
    ("status",),
    ("runbeat", "--once"),
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_a_command_on_an_unmigrated_database_says_run_migrate(argv, tmp_path):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    (var_dir / "cronfleet.sqlite3").write_bytes(b"")  # an empty SQLite file: no tables
    result = run_manage(
        *argv, DJANGO_DEBUG="true", CRONFLEET_VAR_DIR=str(var_dir), DATABASE_URL=None, CELERY_BROKER_URL=None
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [NO_TABLES], result.stderr
