"""Cronfleet's own tables stay out of the databases added for SQL jobs."""

from __future__ import annotations

from django.conf import settings


class SqlDatabasesRouter:
    """Cronfleet's own tables live in "default" only: `migrate` (and the test runner) never
    creates them in a database added for SQL jobs (CRONFLEET_SQL_DATABASES)."""

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return False if db in getattr(settings, "CRONFLEET_SQL_DATABASE_ALIASES", ()) else None
