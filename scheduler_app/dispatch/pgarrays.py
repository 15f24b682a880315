"""PostgreSQL array literals, built in one pass, for the statements that take a column of
values as one array parameter (sql.INSERT_RUNS_PG, sql.ADVANCE_JOBS_PG).

Django's psycopg cursor binds parameters on the client: a Python list becomes ARRAY[...]
with each element dumped and quoted by its own call, a tenth of a beat's CPU in a spike. A
literal such as '{1,2,3}' is one string to quote; the statement casts it (%s::bigint[]).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime


def integers(values: Iterable[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def times(values: Iterable[datetime | None]) -> str:
    """Aware datetimes (None: NULL), in ISO 8601 with their offset."""
    return "{" + ",".join("NULL" if value is None else value.isoformat() for value in values) + "}"


def texts(values: Iterable[str]) -> str:
    """Every element quoted: a comma, a brace, a quote or a backslash in one is its own."""
    return "{" + ",".join('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values) + "}"
