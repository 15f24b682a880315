"""The worker's check of its kept connection before a start (worker/reconnect.py), against
the real PostgreSQL: a session the server ended is replaced, a healthy one is kept without
a query. Real workers across a real restart: the system tier's test_database_restart."""

from unittest import mock

import pytest
from django.db import OperationalError, connection, connections, transaction

from scheduler_app.models import RunState
from scheduler_app.worker import execution, reconnect
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as in a worker


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def end_session(pid: int) -> None:
    """As a restart does to every session: the server ends this one (pg_terminate_backend)."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    wait_for(lambda: reconnect.server_spoke(connection.connection), timeout=10, what="the session's end to arrive")


def test_a_start_after_the_server_ended_the_kept_session_starts_on_a_new_one(make_run):
    run = make_run()
    kept = backend_pid()
    end_session(kept)

    started = execution.start_runs([(run.id, 1)], worker="w")

    assert [s.run.id for s in started] == [run.id] and backend_pid() != kept
    run.refresh_from_db()
    assert run.state == RunState.RUNNING


def test_a_healthy_kept_session_is_kept_without_a_query():
    kept = backend_pid()

    with mock.patch.object(connections["default"], "is_usable") as is_usable:
        assert reconnect.drop_closed_connection() is False

    is_usable.assert_not_called()
    assert backend_pid() == kept


def test_a_session_the_server_ended_is_not_replaced_inside_a_transaction():
    """The block's statements so far were on the old session: it must fail (here at its
    commit), not go on on a new one."""
    with pytest.raises(OperationalError), transaction.atomic():
        raw = connection.connection
        end_session(backend_pid())  # the block's first statement
        assert reconnect.drop_closed_connection() is False
        assert connection.connection is raw
