"""Migration operations that change the indexes of a live ledger without stopping it.

On PostgreSQL a plain CREATE INDEX holds off every write to its table while it reads the
table (at 10,000,000 runs, the beats' inserts and the workers' updates wait for the whole
build), and a plain DROP INDEX waits for, then blocks, every use of the table. These build
and drop CONCURRENTLY there (a migration using them sets `atomic = False`: PostgreSQL does
neither inside a transaction); SQLite has no such thing, nor the need.

They live outside the migrations package, whose every module Django takes for a migration.
"""

from __future__ import annotations

from django.db import migrations, router


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


class IndexSQL(migrations.operations.base.Operation):
    """SQL about an index, for the database alone (the project state does not change):
    `sql` forwards, `reverse_sql` backwards, each with {concurrently} standing for
    "CONCURRENTLY " on PostgreSQL and nothing elsewhere; `postgres_only`: nothing elsewhere
    (an index kind SQLite lacks). Unlike RunPython's, sqlmigrate shows this SQL, and
    tests/integration/models/test_migrations.py reads it."""

    reduces_to_sql = True
    reversible = True

    def __init__(self, sql: str, reverse_sql: str, postgres_only: bool = False) -> None:
        self.sql, self.reverse_sql, self.postgres_only = sql, reverse_sql, postgres_only

    def deconstruct(self):
        return (
            self.__class__.__qualname__,
            [],
            {"sql": self.sql, "reverse_sql": self.reverse_sql, "postgres_only": self.postgres_only},
        )

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        self._execute(app_label, schema_editor, self.sql)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        self._execute(app_label, schema_editor, self.reverse_sql)

    def _execute(self, app_label: str, schema_editor, sql: str) -> None:
        if not router.allow_migrate(schema_editor.connection.alias, app_label):
            return  # a database the routers keep this app out of (the SQL jobs' targets)
        postgres = _concurrently(schema_editor)
        if postgres or not self.postgres_only:
            schema_editor.execute(sql.format(concurrently="CONCURRENTLY " if postgres else ""))

    def describe(self):
        return f"Index SQL: {self.sql.format(concurrently='')[:60]}"


def drop_column_index(table: str, column: str, name: str) -> IndexSQL:
    """Drop the index Django made for one column of a table (a foreign key's db_index), by
    name; backwards, build it again. The database side only: pair it with the field's
    AlterField(db_index=False) in SeparateDatabaseAndState, whose own database side would
    also drop and add back the foreign key's constraint, which checks every row of the table
    while writes wait."""
    return IndexSQL(
        f"DROP INDEX {{concurrently}}IF EXISTS {name}",
        f"CREATE INDEX {{concurrently}}IF NOT EXISTS {name} ON {table} ({column})",
    )
