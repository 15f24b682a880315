"""A statement's result read without holding it: at most max_rows + 1 rows ever reach the
worker's memory, whatever the size of the result, and the count of rows is still exact.

PostgreSQL buffers a whole result in the client unless asked otherwise, so the statement
runs in one of three shapes, the first its grammar accepts (learnt on its first run, in a
savepoint, and remembered for its text):

- "cursor": a query (SELECT, VALUES, TABLE, WITH ... SELECT) as ``DECLARE .. NO SCROLL CURSOR
  FOR <sql>``, ``FETCH FORWARD <max_rows + 1>``, then ``MOVE FORWARD ALL``: the server
  computes every row (so a function called per row is called for each, FOR UPDATE locks
  each row, and the count is exact) but sends none past the first max_rows + 1.
- "returning": a write with RETURNING as ``WITH cronfleet_rows AS (<sql>) SELECT *, count(*)
  OVER () FROM cronfleet_rows LIMIT <max_rows + 1>``: a data-modifying WITH always runs to
  completion, whatever its outer query reads; the extra column is the count.
- "plain": anything else (a write without RETURNING, SHOW, EXPLAIN, CALL, DDL): as written.
  Such a statement returns no rows or a few; a write with its own top-level data-modifying
  WITH lands here too, and its rows are fetched whole.

A failed shape fails in parsing (syntax_error or feature_not_supported, before anything runs)
and is rolled back to the savepoint; any other error is the statement's own and is raised.

MariaDB: mysqlclient's unbuffered cursor (SSCursor, mysql_use_result) streams the rows; the
first max_rows + 1 are kept and the rest read off the connection and dropped in C (the
client library's own loop), counting them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scheduler_app.targets.sql.statements import Statement

CURSOR = "cronfleet_rows"  # the cursor's (and the RETURNING wrapper's) name


_SAVEPOINT = "cronfleet_shape"


# SQLSTATEs of a shape PostgreSQL's grammar refuses for this text: syntax_error ("syntax
# error at or near UPDATE" after DECLARE) and feature_not_supported ("DECLARE CURSOR must
# not contain data-modifying statements in WITH", "WITH query does not have a RETURNING clause").
_NOT_THIS_SHAPE = frozenset({"42601", "0A000"})


# (alias, SQL text) -> the shape PostgreSQL took it in, learnt on the statement's first run.
# Bounded by the allow-list; the grammar's answer does not change with the parameters.
_SHAPES: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Fetched:
    columns: list[str]
    rows: list  # at most `limit` rows, as the driver returned them
    rows_affected: int  # rows the query produced or the write changed, all of them


def _columns(cursor) -> list[str]:
    return [column[0] for column in cursor.description] if cursor.description else []


def timeout_sql(seconds: float) -> str:
    """PostgreSQL: the transaction's statements may each run this long (a validated number)."""
    return f"SET LOCAL statement_timeout = {max(1, round(seconds * 1000))}"


def _by_cursor(cursor, sql: str, bound: Mapping, limit: int, remaining: Callable[[], float]) -> Fetched:
    cursor.execute(f"DECLARE {CURSOR} NO SCROLL CURSOR FOR {sql}", bound)
    cursor.execute(f"FETCH FORWARD {limit} FROM {CURSOR}")
    columns, rows = _columns(cursor), cursor.fetchall()
    produced = len(rows)
    if produced == limit:  # there may be more: the server runs the query to its end, sending nothing
        cursor.execute(timeout_sql(remaining()))  # FETCH and MOVE share the statement's timeout
        cursor.execute(f"MOVE FORWARD ALL FROM {CURSOR}")
        produced += cursor.rowcount
    cursor.execute(f"CLOSE {CURSOR}")
    return Fetched(columns, rows, produced)


def _by_returning(cursor, sql: str, bound: Mapping, limit: int, remaining: Callable[[], float]) -> Fetched:
    # The newlines keep a trailing "-- comment" in the statement from swallowing the ")".
    cursor.execute(f"WITH {CURSOR} AS (\n{sql}\n) SELECT *, count(*) OVER () FROM {CURSOR} LIMIT {limit}", bound)
    columns, rows = _columns(cursor), cursor.fetchall()
    return Fetched(columns[:-1], [row[:-1] for row in rows], rows[0][-1] if rows else 0)


def _plain(cursor, sql: str, bound: Mapping, limit: int, remaining: Callable[[], float]) -> Fetched:
    cursor.execute(sql, bound)
    rows = cursor.fetchmany(limit) if cursor.description else []
    return Fetched(_columns(cursor), rows, cursor.rowcount)


_RUNNERS = {"cursor": _by_cursor, "returning": _by_returning, "plain": _plain}


def fetch_postgresql(cursor, stmt: Statement, bound: Mapping, limit: int, remaining: Callable[[], float]) -> Fetched:
    """Run ``stmt`` in its shape on psycopg's ``cursor`` (inside the run's transaction);
    ``remaining()`` is how many seconds of its timeout are left."""
    key = (stmt.database, stmt.sql)
    known = _SHAPES.get(key)
    if known is not None:
        return _RUNNERS[known](cursor, stmt.sql, bound, limit, remaining)
    for shape in ("cursor", "returning"):
        cursor.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            fetched = _RUNNERS[shape](cursor, stmt.sql, bound, limit, remaining)
        except Exception as exc:  # psycopg's error (not imported: a MariaDB-only deployment may lack it)
            if getattr(exc, "sqlstate", None) not in _NOT_THIS_SHAPE:
                raise
            cursor.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
            continue
        cursor.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        _SHAPES[key] = shape
        return fetched
    fetched = _plain(cursor, stmt.sql, bound, limit, remaining)
    _SHAPES[key] = "plain"
    return fetched


def fetch_mysql(cursor, text: str, bound: Mapping, limit: int) -> Fetched:
    """Run ``text`` on mysqlclient's unbuffered ``cursor``; keep ``limit`` rows, count the rest."""
    cursor.execute(text, bound)
    if not cursor.description:
        return Fetched([], [], cursor.rowcount)
    columns, rows = _columns(cursor), list(cursor.fetchmany(limit))
    return Fetched(columns, rows, _count_through(cursor, len(rows)))


def _count_through(cursor, fetched: int) -> int:
    """All the rows of the unbuffered result, the ones not fetched read and dropped."""
    result = getattr(cursor, "_result", None)  # mysqlclient's result object of mysql_use_result
    if result is not None and hasattr(result, "discard") and hasattr(result, "num_rows"):
        result.discard()  # mysql_fetch_row until the end, in C: no row becomes a Python object
        return result.num_rows()  # of an unbuffered result: the rows read so far, i.e. all
    while batch := cursor.fetchmany(1000):
        fetched += len(batch)
    return fetched
