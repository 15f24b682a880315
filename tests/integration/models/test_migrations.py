"""Migrations change a live ledger without stopping it: from 0010 on, every index built or
dropped on a table that already exists is built or dropped CONCURRENTLY on PostgreSQL (a
plain CREATE INDEX holds off every write to the table while it reads it), and no foreign
key is added back (that checks every row while writes wait). Read from the SQL each
migration sends to PostgreSQL; run for real, backwards and forwards, on a database of their
own in tests/system/models/test_migrations.py."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

APP = "scheduler_app"
FIRST_CAREFUL = "0010_retention"  # the first migration written to this rule
CREATE_INDEX = re.compile(r'CREATE (?:UNIQUE )?INDEX .*? ON "?(\w+)"?', re.S)
ADD_FOREIGN_KEY = re.compile(r'ALTER TABLE "?(\w+)"? ADD CONSTRAINT .* FOREIGN KEY')
CREATE_TABLE = re.compile(r'CREATE TABLE "?(\w+)"?')


def _careful_migrations(executor: MigrationExecutor) -> list:
    names = sorted(name for app, name in executor.loader.disk_migrations if app == APP)
    return [executor.loader.get_migration(APP, name) for name in names if name >= FIRST_CAREFUL]


def _sql(executor: MigrationExecutor, migration) -> list[str]:
    return [
        statement for statement in executor.loader.collect_sql([(migration, False)]) if not statement.startswith("--")
    ]


@pytest.mark.django_db
def test_migrations_change_existing_tables_indexes_concurrently_on_postgres():
    executor = MigrationExecutor(connection)
    checked = 0
    for migration in _careful_migrations(executor):
        statements = _sql(executor, migration)
        new_tables = {match.group(1) for statement in statements if (match := CREATE_TABLE.search(statement))}
        index_changes = [
            statement
            for statement in statements
            if statement.startswith("DROP INDEX")
            or ((match := CREATE_INDEX.search(statement)) and match.group(1) not in new_tables)
        ]
        for statement in index_changes:
            assert "CONCURRENTLY" in statement, f"{migration.name} blocks writes while it changes an index: {statement}"
        if index_changes:
            assert not migration.atomic, f"{migration.name} builds CONCURRENTLY, which no transaction may hold"
        for statement in statements:
            match = ADD_FOREIGN_KEY.search(statement)
            assert not match or match.group(1) in new_tables, (
                f"{migration.name} adds a foreign key to a table it did not make, checking every row: {statement}"
            )
        checked += len(index_changes)
    assert checked >= 6  # 0010's three, 0014's two, 0016's and 0018's one each
