"""After every run, the session of its connection is reset, so nothing a statement left there
reaches the next run on that connection (another job's, another tenant's): session advisory
locks and named locks (GET_LOCK), settings (set_config(.., false), user variables), temporary
tables, prepared statements, open cursors, LISTEN.

PostgreSQL: ``DISCARD ALL``, then Django's own session set-up again (its time zone, the
OPTIONS' assume_role), since DISCARD ALL resets them too; settings given at connection
(OPTIONS "options": lock_timeout, statement_timeout) are kept, being the session's defaults.
MariaDB: the connection is closed; Django opens a new one for the next run.
"""

from __future__ import annotations

from django.db import Error


def reset_session(connection, vendor: str) -> None:
    """Reset ``connection``'s session (outside any transaction), or close it when that fails."""
    if connection.connection is None:
        return
    if vendor == "postgresql" and _discard_all(connection):
        return
    try:
        connection.close()
    except Error:  # a broken connection: Django has dropped it anyway
        pass


def _discard_all(connection) -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("DISCARD ALL")
        if not _forget_prepared(connection.connection):
            return False
        with connection.wrap_database_errors:
            connection.init_connection_state()
    except Error:
        return False
    return True


def _forget_prepared(raw) -> bool:
    """Make psycopg forget the statements it prepared in this session (the worker's own,
    worker.transitions): DISCARD ALL dropped them in the server. psycopg notices that command
    only when it has not counted its text yet; a DISCARD ALL sent while nothing was prepared
    stays counted, so after the worker prepared again the next one would go unnoticed and
    the worker would name statements the server no longer has ('prepared statement "_pg3_2"
    does not exist'; tests/integration/targets/test_sql_bounds.py). psycopg has no public call for this;
    False when its private cache is not where this version keeps it (the caller then closes
    the connection)."""
    prepared = getattr(raw, "_prepared", None)
    if prepared is None or not callable(getattr(prepared, "clear", None)):
        return False
    prepared.clear()
    return True
