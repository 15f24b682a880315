"""The run task's own database work when the database is gone (and Celery's result backend's,
in resultbackend.py).

The run row in the ledger is the truth; Celery's result (django-celery-results' table,
`django-db`) only mirrors a failure for Flower. During a database outage or a failover both
failed with a traceback each: the pool process writing a failure, the main process writing
it again when the pool process could not (Request.on_failure), and the task itself when it
could not reach the ledger. Each now says what happened in one line, and what happens next:

- a result not written: nothing is lost, the run's row says how it ended, or its lease
  runs out and a beat marks it lost and retries it;
- a task that could not reach the ledger raises DatabaseUnreachable, which Celery logs as
  expected (no traceback) and Flower shows as FAILURE: a run not started is still queued,
  and a beat publishes it again; a run started is retried after its lease.

Only the errors of a connection that cannot be made or was lost (OperationalError,
InterfaceError) are taken so; any other error is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)
UNREACHABLE = (OperationalError, InterfaceError)


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class DatabaseUnreachable(Exception):
    """The ledger could not be reached: this delivery changed nothing it knows of."""


@contextlib.contextmanager
def ledger_reachable(what: str) -> Iterator[None]:
    """Turn a lost database inside a run task into one line and DatabaseUnreachable."""
    try:
        yield
    except UNREACHABLE as exc:
        raise DatabaseUnreachable(
            f"{what}: database unreachable ({first_line(exc)}); a run not started stays queued and a beat "
            "publishes it again, a run started is retried after its lease"
        ) from None
