"""Migration operations that change the indexes of a live ledger without stopping it.

On PostgreSQL a plain CREATE INDEX holds off every write to its table while it reads the
table (at 10,000,000 runs, the beats' inserts and the workers' updates wait for the whole
build), and a plain DROP INDEX waits for, then blocks, every use of the table. These build
and drop CONCURRENTLY there (a migration using them sets `atomic = False`: PostgreSQL does
neither inside a transaction); SQLite has no such thing, nor the need.

They live outside the migrations package, whose every module Django takes for a migration.
"""

from __future__ import annotations

from django.db import migrations


def _concurrently(schema_editor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """AddIndex, built CONCURRENTLY on PostgreSQL."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if not _concurrently(schema_editor):
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if not _concurrently(schema_editor):
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)


class DropColumnIndex(migrations.operations.base.Operation):
    """Drop the index Django made for one column of a table (a foreign key's db_index), by
    name, CONCURRENTLY on PostgreSQL; backwards, build it again. The database side only:
    pair it with the field's AlterField(db_index=False) in SeparateDatabaseAndState, whose
    own database side would also drop and add back the foreign key's constraint, which
    checks every row of the table while writes wait."""

    reduces_to_sql = True
    reversible = True

    def __init__(self, table: str, column: str, name: str) -> None:
        self.table, self.column, self.name = table, column, name

    def deconstruct(self):
        return self.__class__.__qualname__, [], {"table": self.table, "column": self.column, "name": self.name}

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        concurrently = "CONCURRENTLY " if _concurrently(schema_editor) else ""
        schema_editor.execute(f"DROP INDEX {concurrently}IF EXISTS {self.name}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        concurrently = "CONCURRENTLY " if _concurrently(schema_editor) else ""
        schema_editor.execute(f"CREATE INDEX {concurrently}IF NOT EXISTS {self.name} ON {self.table} ({self.column})")

    def describe(self):
        return f"Drop index {self.name} of {self.table}.{self.column}"


class PostgresOnlySQL(migrations.operations.base.Operation):
    """SQL for PostgreSQL alone (an index kind SQLite lacks), which sqlmigrate shows and
    tests/test_migrations.py reads, where RunPython's SQL is neither."""

    reduces_to_sql = True
    reversible = True

    def __init__(self, sql: str, reverse_sql: str) -> None:
        self.sql, self.reverse_sql = sql, reverse_sql

    def deconstruct(self):
        return self.__class__.__qualname__, [], {"sql": self.sql, "reverse_sql": self.reverse_sql}

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if _concurrently(schema_editor):
            schema_editor.execute(self.sql)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if _concurrently(schema_editor):
            schema_editor.execute(self.reverse_sql)

    def describe(self):
        return f"PostgreSQL only: {self.sql[:60]}"
