"""The worker's kept database connection, checked before each start (transitions.start_runs).

A worker keeps its connection from task to task (CELERY_DB_REUSE_MAX) and sends the start
and end statements on it directly (transitions.execute). Django's check before reuse never
runs there: close_if_unusable_or_obsolete(), which re-arms the CONN_HEALTH_CHECKS test, is
called at a web request's start and end (in a worker, by tasks.drop_broken_connections,
only after an error), and the armed test is made only when a cursor is opened through
Django, which the start statement is not. So after a PostgreSQL restart or failover each
worker process started its next run or batch on the connection the old server had closed,
and that whole delivery failed (DatabaseUnreachable) until a beat published its runs again.

drop_closed_connection() is that check, made by the app whatever the host's settings, once
per start statement (once per batch): on PostgreSQL it asks the kernel whether the server
sent anything to the idle connection, which costs no round trip; only then does it ask
Django whether the connection still works (SELECT 1), and closes it if not, so the start
connects afresh.
"""

from __future__ import annotations

import logging
import select

import psycopg
from django.db import connection as default_connection

logger = logging.getLogger(__name__)


def drop_closed_connection(conn=default_connection) -> bool:
    """Close `conn` (this thread's default connection) if the database closed it while it
    sat idle; True if it was closed. Never inside a transaction: a block that already
    used the connection must fail, not go on on a new one."""
    if conn.connection is None or conn.in_atomic_block:
        return False
    if conn.vendor == "postgresql" and not server_spoke(conn.connection):
        return False
    if conn.is_usable():
        return False
    logger.info("the database closed this worker process's idle connection; connecting afresh")
    conn.close()
    return True


def server_spoke(raw) -> bool:
    """Whether anything is waiting on the socket of `raw`, an idle psycopg connection. An
    idle session in autocommit, its results all read, gets nothing from a healthy server;
    a server that ends the session (restart, shutdown, pg_terminate_backend) sends its
    farewell and closes the socket, which leaves it readable. Also true for a NOTIFY, and
    when it cannot tell: the caller then checks with a query."""
    if raw.closed or not hasattr(select, "poll"):
        return True
    try:
        fd = raw.fileno()
    except psycopg.OperationalError:  # the connection is lost: the query will say so
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)  # POLLHUP and POLLERR are reported whatever is asked
    return bool(poller.poll(0))
