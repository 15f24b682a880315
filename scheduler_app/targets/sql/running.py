"""One statement run in a transaction of its own on its alias, with its timeout, isolation
and read-only setting; at most max_rows + 1 rows fetched (fetching.py), the result kept
within its row and byte caps, and the session reset after the run (session.py)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal

from django.db import DatabaseError, connections, transaction

from scheduler_app.targets.sql.errors import StatementError, classify_error
from scheduler_app.targets.sql.fetching import Fetched, fetch_mysql, fetch_postgresql, timeout_sql
from scheduler_app.targets.sql.params import bind_values, check_params
from scheduler_app.targets.sql.session import reset_session
from scheduler_app.targets.sql.statements import (
    ISOLATION_LEVELS,
    JOB_TIMEOUT_SHARE,
    MIN_TIMEOUT,
    Statement,
    check_tenant,
    statement,
)


def _jsonable(value):
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(value)


def _fit(result: dict, rows: list, max_bytes: int) -> dict:
    """``result`` with as many of ``rows`` as fit in ``max_bytes`` of JSON (whole rows only,
    so the recorded result stays valid JSON); ``truncated`` when some were left out."""

    def size(count: int) -> int:
        return len(json.dumps({**result, "rows": rows[:count]}, sort_keys=True).encode())

    if size(len(rows)) <= max_bytes:
        return {**result, "rows": rows}
    low, high = 0, len(rows)  # size(low) fits or low == 0; size(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if size(middle) <= max_bytes else (low, middle)
    return {**result, "rows": rows[:low], "truncated": True}


def effective_timeout(stmt: Statement, job_timeout: float) -> float:
    return max(MIN_TIMEOUT, min(stmt.timeout, job_timeout * JOB_TIMEOUT_SHARE))


def _preamble(stmt: Statement, timeout: float) -> list[str]:
    """The statements that open the transaction (constants and validated numbers only)."""
    level = ISOLATION_LEVELS.get(stmt.isolation or "")
    if stmt.vendor == "postgresql":
        modes = [f"ISOLATION LEVEL {level}"] if level else []
        modes += ["READ ONLY"] if stmt.read_only else []
        setup = [f"SET TRANSACTION {', '.join(modes)}"] if modes else []
        return [*setup, timeout_sql(timeout)]
    setup = [f"SET TRANSACTION ISOLATION LEVEL {level}"] if level else []
    return [*setup, "START TRANSACTION READ ONLY" if stmt.read_only else "START TRANSACTION"]


def _statement_text(stmt: Statement, timeout: float) -> str:
    if stmt.vendor == "postgresql":
        return stmt.sql
    # max_statement_time bounds the statement; lock waits are bounded alike (whole seconds).
    return (
        f"SET STATEMENT max_statement_time={timeout:.3f}, innodb_lock_wait_timeout={math.ceil(timeout)} FOR {stmt.sql}"
    )


def run_statement(
    name: str,
    params: Mapping,
    *,
    config: Mapping,
    databases: Mapping,
    fire: Mapping,
    job_timeout: float,
    max_bytes: int,
) -> dict:
    """Run allow-listed statement ``name`` once, in its own transaction on its alias.

    ``fire`` holds the reserved values (RESERVED). Returns rows affected, the columns, at
    most max_rows rows fitted into ``max_bytes`` of JSON, and the elapsed time. Raises
    InvalidSql (the entry, the fire's tenant or the parameters are refused) or StatementError.
    """
    stmt = statement(name, config, databases)
    check_tenant(stmt, fire.get("tenant"))
    values = check_params(stmt, params)
    bound = bind_values(stmt, values, fire)
    timeout = effective_timeout(stmt, job_timeout)
    connection = connections[stmt.database]
    if connection.in_atomic_block:
        raise StatementError(
            "in_transaction",
            f"database {stmt.database!r} is inside an open transaction here; a SQL job needs a transaction of its own",
            retryable=False,
        )
    started = time.monotonic()
    try:
        fetched = _run(connection, stmt, bound, timeout, started)
        elapsed = time.monotonic() - started  # the statement's time, not the reset's
    except DatabaseError as exc:
        error = classify_error(exc, stmt.vendor)
        raise StatementError(
            error.kind,
            f"{error.detail} (statement {stmt.name!r} on {stmt.database!r}, timeout {timeout:g}s)",
            retryable=error.retryable,
        ) from None
    finally:
        reset_session(connection, stmt.vendor)  # nothing of this run reaches the next on this connection
    rows = [list(row) for row in fetched.rows]
    result = {
        "statement": stmt.name,
        "database": stmt.database,
        "rows_affected": fetched.rows_affected,
        "columns": fetched.columns,
        "truncated": len(rows) > stmt.max_rows,
        "elapsed_ms": round(elapsed * 1000, 1),
    }
    return _fit(result, _jsonable(rows[: stmt.max_rows]), max_bytes)


def _run(connection, stmt: Statement, bound: Mapping, timeout: float, started: float) -> Fetched:
    """The statement in its transaction; at most max_rows + 1 of its rows fetched."""
    limit = stmt.max_rows + 1
    with transaction.atomic(using=stmt.database), connection.wrap_database_errors:
        if stmt.vendor == "mysql" and not connection.mysql_is_mariadb:
            raise StatementError(
                "not_supported",
                f"{stmt.database!r} is MySQL, which has no statement timeout "
                "for writes (max_statement_time); SQL jobs run on MariaDB",
                retryable=False,
            )
        cursor = _cursor(connection, stmt.vendor)
        try:
            for setup in _preamble(stmt, timeout):
                cursor.execute(setup)
            if stmt.vendor == "postgresql":
                return fetch_postgresql(cursor, stmt, bound, limit, lambda: timeout - (time.monotonic() - started))
            return fetch_mysql(cursor, _statement_text(stmt, timeout), bound, limit)
        finally:
            cursor.close()


def _cursor(connection, vendor: str):
    """A cursor of the driver itself. PostgreSQL: psycopg's server-side-binding Cursor (the
    parameters travel apart from the statement; Django's own cursors bind client-side).
    MariaDB: mysqlclient's unbuffered SSCursor (rows streamed, not stored whole)."""
    connection.ensure_connection()
    if vendor == "postgresql":
        import psycopg  # PostgreSQL only: a MariaDB-only deployment need not have it

        return psycopg.Cursor(connection.connection)
    from MySQLdb.cursors import SSCursor  # MariaDB only: a PostgreSQL-only deployment need not have it

    return connection.connection.cursor(SSCursor)
