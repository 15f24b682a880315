"""Migrations change a live ledger without stopping it: from 0010 on, every index built or
dropped on a table that already exists is built or dropped CONCURRENTLY on PostgreSQL (a
plain CREATE INDEX holds off every write to the table while it reads it), and no foreign
key is added back (that checks every row while writes wait). Read from the SQL each
migration sends to PostgreSQL, and run for real, backwards and forwards, on a database of
their own."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import psycopg
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.conftest import ROOT, process_env

APP = "scheduler_app"
FIRST_CAREFUL = "0010_retention"  # the first migration written to this rule
CREATE_INDEX = re.compile(r'CREATE (?:UNIQUE )?INDEX .*? ON "?(\w+)"?', re.S)
ADD_FOREIGN_KEY = re.compile(r'ALTER TABLE "?(\w+)"? ADD CONSTRAINT .* FOREIGN KEY')
CREATE_TABLE = re.compile(r'CREATE TABLE "?(\w+)"?')


def _careful_migrations(executor: MigrationExecutor) -> list:
    names = sorted(name for app, name in executor.loader.disk_migrations if app == APP)
    return [executor.loader.get_migration(APP, name) for name in names if name >= FIRST_CAREFUL]


def _sql(executor: MigrationExecutor, migration) -> list[str]:
    return [statement for statement in executor.loader.collect_sql([(migration, False)]) if not statement.startswith("--")]


@pytest.mark.django_db
def test_migrations_change_existing_tables_indexes_concurrently_on_postgres():
    executor = MigrationExecutor(connection)
    checked = 0
    for migration in _careful_migrations(executor):
        statements = _sql(executor, migration)
        new_tables = {match.group(1) for statement in statements if (match := CREATE_TABLE.search(statement))}
        index_changes = [statement for statement in statements if statement.startswith("DROP INDEX")
                         or ((match := CREATE_INDEX.search(statement)) and match.group(1) not in new_tables)]
        for statement in index_changes:
            assert "CONCURRENTLY" in statement, f"{migration.name} blocks writes while it changes an index: {statement}"
        if index_changes:
            assert not migration.atomic, f"{migration.name} builds CONCURRENTLY, which no transaction may hold"
        for statement in statements:
            match = ADD_FOREIGN_KEY.search(statement)
            assert not match or match.group(1) in new_tables, (
                f"{migration.name} adds a foreign key to a table it did not make, checking every row: {statement}")
        checked += len(index_changes)
    assert checked >= 6  # 0010's three, 0014's two, 0016's and 0018's one each


@pytest.mark.slow
@pytest.mark.django_db
def test_the_concurrent_migrations_run_backwards_and_forwards_on_postgres():
    name = f"cronfleet_migrations_{uuid.uuid4().hex[:8]}"
    settings = connection.settings_dict
    server = f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} user={settings['USER'] or 'postgres'}"
    with psycopg.connect(f"{server} dbname=postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = process_env(DATABASE_URL=f"postgres://{settings['USER'] or 'postgres'}@"
                                       f"{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{name}")

        def migrate(*target: str) -> None:
            done = subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0", *target], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr

        def indexes() -> set[str]:
            with psycopg.connect(f"{server} dbname={name}") as conn:
                return {row[0] for row in conn.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}

        migrate()
        latest = indexes()
        made = {"job_retention_idx", "jobrun_triggered_idx", "jobrun_finished_brin", "jobrun_tenant_state_idx",
                "job_tenant_due_idx"}
        dropped = {"scheduler_app_jobrun_job_id_4f251f58", "scheduler_app_jobrun_tenant_id_1bb4eedc"}
        assert made <= latest and not dropped & latest
        migrate(APP, FIRST_CAREFUL)  # 0010 itself stays
        assert "scheduler_app_jobrun_tenant_id_1bb4eedc" in indexes()
        migrate(APP, "0009_job_batch")
        before = indexes()
        assert dropped <= before and not made & before  # the foreign keys' own indexes, back
        migrate()
        assert indexes() == latest
    finally:
        with psycopg.connect(f"{server} dbname=postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
