"""SQL jobs run through the worker code on the real PostgreSQL and MariaDB.

Each test runs once on PostgreSQL (the "default" alias) and once on MariaDB (the "mariadb"
alias that tests/settings.py adds through CRONFLEET_SQL_DATABASES). MariaDB's tests are
skipped, saying why, only when MariaDB does not answer and this is not CI; with CI=true they
fail instead. The fixtures and helpers are tests/support/sql_jobs.py's; a real worker running a
SQL job is tests/system/targets/test_sql_running.py.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.conf import settings
from django.db import connections

from scheduler_app import services
from scheduler_app.targets import sql as sqljobs
from tests.conftest import NOW, wait_for
from tests.support.sql_jobs import (  # noqa: F401 - alias, allow_list, tables: fixtures used by name
    BACKENDS,
    alias,
    allow_list,
    execute,
    result_of,
    run_once,
    sql_job,
    tables,
    vendor,
)

# --- parameters are data ------------------------------------------------------------------

HOSTILE = [
    "'; DROP TABLE sqljob_items; --",
    "' OR '1'='1",
    "O'Reilly",
    'say "hi"',
    "back\\slash \\' \\\\",
    "%(note)s %s $1 ?",
    "line\nbreak\ttab",
    "\u00e9t\u00e9 \U0001f600",
]


def test_injection_strings_passed_as_parameters_land_as_data(tables, allow_list, tenant):
    for number, value in enumerate(HOSTILE, start=10):
        outcome, run = run_once(
            sql_job(tenant, "add_item", {"id": number, "name": value, "note": value}, name=f"add-{number}")
        )
        assert outcome.state == "succeeded", run.error
        assert result_of(run)["rows_affected"] == 1

    stored = execute(tables, "SELECT id, name, note FROM sqljob_items WHERE id >= 10 ORDER BY id")
    assert stored == [(number, value, value) for number, value in enumerate(HOSTILE, start=10)]
    outcome, run = run_once(sql_job(tenant, "items", {"first": 10}))
    assert result_of(run)["rows"] == [[number, value, value] for number, value in enumerate(HOSTILE, start=10)]
    assert execute(tables, "SELECT count(*) FROM sqljob_items")[0][0] == 3 + len(HOSTILE)  # the table is there


def test_a_nul_character_is_refused_when_the_job_is_saved_and_when_it_runs(tables, allow_list, tenant):
    with pytest.raises(services.InvalidInput) as caught:
        sql_job(tenant, "add_item", {"id": 9, "name": "nul\x00here"})
    assert caught.value.field == "sql.params.name" and "NUL character" in caught.value.message

    # A run checks again (the ledger's jsonb cannot hold a NUL, so call the runner itself).
    fire = {"fire_key": "k", "scheduled_at": NOW, "attempt": 1, "tenant": tenant.slug}
    with pytest.raises(sqljobs.InvalidSql) as caught:
        sqljobs.run_statement(
            "add_item",
            {"id": 9, "name": "nul\x00here"},
            config=allow_list,
            databases=settings.DATABASES,
            fire=fire,
            job_timeout=10,
            max_bytes=8192,
        )
    assert caught.value.field == "params.name" and "NUL character" in caught.value.message
    assert not execute(tables, "SELECT * FROM sqljob_items WHERE id = 9")


def test_lists_bind_as_an_array_or_an_in_list(tables, allow_list, tenant):
    outcome, run = run_once(sql_job(tenant, "named", {"names": ["one", "three", "') OR 1=1 --"], "ids": [1, 2, 3]}))

    assert outcome.state == "succeeded", run.error
    assert result_of(run)["rows"] == [[1], [3]]


def test_typed_parameters_reach_the_database_as_their_types(tables, allow_list, tenant):
    params = {"i": -7, "f": 2.5, "b": True, "d": "2024-02-29", "t": "2024-03-01T09:30:00+01:00"}
    outcome, run = run_once(sql_job(tenant, "typed", params))

    assert outcome.state == "succeeded", run.error
    [row] = result_of(run)["rows"]
    if vendor(tables) == "postgresql":
        assert row == [-7, 2.5, True, "2024-02-29", "2024-03-01T08:30:00+00:00"]
    else:  # MariaDB: booleans are 1/0, datetimes the UTC wall time (no zone)
        assert row[:4] == [-7, 2.5, 1, "2024-02-29"] and row[4].startswith("2024-03-01 08:30:00")


def test_a_literal_percent_is_written_twice_and_a_final_semicolon_is_allowed(tables, allow_list, tenant):
    outcome, run = run_once(sql_job(tenant, "percent"))

    assert result_of(run)["rows"] == [["two"], ["three"]]


def test_the_fire_s_key_time_attempt_and_tenant_are_parameters_so_a_statement_is_idempotent(tables, allow_list, tenant):
    job = sql_job(tenant, "record_fire")
    outcome, run = run_once(job)
    assert outcome.state == "succeeded", run.error
    outcome, again = run_once(job, run=run, attempt=2)  # the same fire again: its key is the same
    assert outcome.state == "succeeded", again.error
    # The upsert updated the row it inserted the first time (MariaDB counts such a row twice).
    assert result_of(again)["rows_affected"] == (1 if vendor(tables) == "postgresql" else 2)

    [(fire_key, scheduled_at, attempt, slug, hits)] = execute(tables, "SELECT * FROM sqljob_fires")
    assert (fire_key, attempt, slug, hits) == (run.fire_key, 1, tenant.slug, 2)
    if vendor(tables) == "postgresql":
        assert scheduled_at == NOW
    else:
        assert scheduled_at == NOW.replace(tzinfo=None)  # UTC wall time


# --- read-only, timeouts, locks -----------------------------------------------------------


def test_a_read_only_statement_that_writes_fails_permanently(tables, allow_list, tenant):
    outcome, run = run_once(sql_job(tenant, "sneaky_write", max_attempts=3))

    assert (outcome.state, run.state, run.attempt) == ("failed", "failed", 1)
    assert run.error.startswith("read_only_transaction: "), run.error
    assert execute(tables, "SELECT sum(n) FROM sqljob_items")[0][0] == 0


def test_a_read_write_statement_writes_and_reports_rows_affected(tables, allow_list, tenant):
    outcome, run = run_once(sql_job(tenant, "bump"))

    assert outcome.state == "succeeded"
    assert result_of(run)["rows_affected"] == 3 and result_of(run)["columns"] == []
    assert (result_of(run)["rows"], result_of(run)["truncated"]) == ([], False)
    assert execute(tables, "SELECT sum(n) FROM sqljob_items")[0][0] == 3


def test_a_statement_over_its_timeout_is_retried_then_dead(tables, allow_list, tenant):
    sleep = 10  # the statement's longest: an attempt not cancelled at its timeout lasts this long
    job = sql_job(tenant, "slow", {"seconds": sleep}, max_attempts=2, retry_backoff_seconds=0)

    started = time.monotonic()
    outcome, run = run_once(job)
    first = time.monotonic() - started
    assert (outcome.state, run.state) == ("retrying", "retrying")
    assert run.error.startswith("statement_timeout: "), run.error
    assert "timeout 0.3s" in run.error
    started = time.monotonic()
    outcome, run = run_once(job, run=run, attempt=2)
    second = time.monotonic() - started
    assert (outcome.state, run.state) == ("dead", "dead")
    assert run.error.startswith("statement_timeout: ")
    print(f"attempts took {first:.2f} s and {second:.2f} s")
    assert first < sleep and second < sleep, (first, second)


def test_the_job_s_own_timeout_caps_the_statement_s(tables, allow_list, tenant, settings):
    settings.CRONFLEET_SQL["slow"]["timeout"] = 60
    job = sql_job(tenant, "slow", {"seconds": 5}, timeout_seconds=1)

    outcome, run = run_once(job)

    assert run.error.startswith("statement_timeout: ") and "timeout 0.9s" in run.error, run.error


def session_id(alias: str, cursor) -> int:
    """The server's id of the session `cursor` talks through (a PostgreSQL backend's pid,
    a MariaDB connection id)."""
    cursor.execute("SELECT pg_backend_pid()" if vendor(alias) == "postgresql" else "SELECT CONNECTION_ID()")
    return cursor.fetchone()[0]


def sessions_waiting_on(alias: str, holder: int) -> list[int]:
    """The sessions waiting for a row lock that session `holder` holds, as seen from a
    connection of its own (a session's view of the lock tables is its transaction's snapshot)."""
    if vendor(alias) == "postgresql":
        sql = (
            "SELECT DISTINCT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.wait_event_type = 'Lock' AND %s = ANY(pg_blocking_pids(a.pid))"
        )
    else:
        sql = (
            "SELECT DISTINCT r.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w "
            "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
            "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
            "WHERE r.trx_state = 'LOCK WAIT' AND b.trx_mysql_thread_id = %s"
        )
    watcher = connections.create_connection(alias)
    try:
        with watcher.cursor() as cursor:
            cursor.execute(sql, [holder])
            return [row[0] for row in cursor.fetchall()]
    finally:
        watcher.close()


def wait_until_someone_waits_on(alias: str, holder: int, what: str) -> list[int]:
    # InnoDB refreshes its information_schema lock tables only once they have gone unread for
    # a while (CACHE_MIN_REFRESH_TIME_US): polling more often keeps reading a stale copy.
    return wait_for(lambda: sessions_waiting_on(alias, holder), timeout=20, interval=0.2, what=what)


def hold_row_lock(
    alias: str,
    row_id: int,
    release: threading.Event,
    then_lock: int | None = None,
    locked: threading.Event | None = None,
    errors: list | None = None,
) -> threading.Thread:
    """A second connection (in a thread of its own) that locks `row_id`, optionally then
    waits until another session waits for that row and asks to lock `then_lock` too, and
    commits when `release` is set. The thread's `session` is its session's id once `locked`
    is set."""

    def hold():
        from django.db import connections as thread_connections
        from django.db import transaction

        try:
            with transaction.atomic(using=alias):
                with thread_connections[alias].cursor() as cursor:
                    thread.session = session_id(alias, cursor)
                    cursor.execute("UPDATE sqljob_items SET n = n + 10, note = 'held' WHERE id = %s", [row_id])
                    if locked is not None:
                        locked.set()
                    if then_lock is not None:
                        # The job locks then_lock first, then waits for row_id: once it waits,
                        # asking for then_lock closes the cycle.
                        wait_until_someone_waits_on(alias, thread.session, f"the job to wait for row {row_id}")
                        cursor.execute("UPDATE sqljob_items SET n = n + 10 WHERE id IN (%s, 3)", [then_lock])
                    release.wait(30)
        except Exception as exc:  # noqa: BLE001
            if errors is not None:
                errors.append(exc)
        finally:
            thread_connections[alias].close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.session = None
    thread.start()
    return thread


def release_once_someone_waits(
    alias: str, holder: threading.Thread, release: threading.Event, errors: list
) -> threading.Thread:
    """Sets `release` once another session waits for a lock `holder` holds (in a thread, so
    the waiting session can be this one)."""

    def watch():
        try:
            wait_until_someone_waits_on(alias, holder.session, "the job to wait for the held row")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            release.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_deadlock_is_retried_and_the_next_attempt_succeeds(tables, allow_list, tenant):
    job = sql_job(tenant, "lock_rows", {"ids": [1, 2]}, max_attempts=3, retry_backoff_seconds=0)
    release, locked, errors = threading.Event(), threading.Event(), []
    # The other connection locks row 1 (and row 3, so it has more to lose than the job: the
    # database picks the job as the deadlock's victim); the job locks row 2, then waits for
    # row 1; the other connection then asks for row 2.
    holder = hold_row_lock(tables, 1, release, then_lock=2, locked=locked, errors=errors)
    assert locked.wait(10), errors
    release.set()  # the holder commits as soon as it got row 2
    outcome, run = run_once(job)
    holder.join(30)

    assert (outcome.state, run.state) == ("retrying", "retrying"), (run.error, errors)
    assert run.error.startswith("deadlock: "), (run.error, errors)
    assert errors == []  # the other transaction won
    outcome, run = run_once(job, run=run, attempt=2)
    assert outcome.state == "succeeded" and result_of(run)["rows"] == [[2], [1]]


def test_a_lock_wait_longer_than_the_timeout_is_retried(tables, allow_list, tenant, settings):
    settings.CRONFLEET_SQL["lock_rows"]["timeout"] = 1
    release, locked = threading.Event(), threading.Event()
    holder = hold_row_lock(tables, 1, release, locked=locked)
    assert locked.wait(10)
    try:
        outcome, run = run_once(sql_job(tenant, "lock_rows", {"ids": [1]}))
    finally:
        release.set()
        holder.join(30)

    assert (outcome.state, run.state) == ("retrying", "retrying")
    assert run.error.split(":")[0] in ("statement_timeout", "lock_timeout"), run.error


@pytest.mark.parametrize("alias", [BACKENDS[0]])
def test_a_serialization_failure_is_retried(tables, allow_list, tenant):
    """PostgreSQL only: InnoDB's REPEATABLE READ updates the latest row version instead of
    failing to serialize (MariaDB 10.11 has no innodb_snapshot_isolation); MariaDB's
    retryable conflicts are the deadlock and lock-wait tests'."""
    job = sql_job(tenant, "bump_one", {"id": 1}, max_attempts=3, retry_backoff_seconds=0)
    release, locked, errors = threading.Event(), threading.Event(), []
    holder = hold_row_lock(tables, 1, release, locked=locked, errors=errors)
    assert locked.wait(10), errors
    watcher = release_once_someone_waits(tables, holder, release, errors)  # commits while the job waits

    outcome, run = run_once(job)
    watcher.join(30)
    holder.join(30)

    assert errors == []
    assert (outcome.state, run.state) == ("retrying", "retrying"), run.error
    assert run.error.startswith("serialization_failure: SQLSTATE 40001"), run.error
    outcome, run = run_once(job, run=run, attempt=2)
    assert outcome.state == "succeeded" and result_of(run)["rows_affected"] == 1
    assert execute(tables, "SELECT n FROM sqljob_items WHERE id = 1")[0][0] == 11


# --- errors that another attempt cannot fix ---------------------------------------------------


@pytest.mark.parametrize(("name", "kind"), [("broken", "syntax_error"), ("missing_table", "undefined_object")])
def test_syntax_errors_and_undefined_objects_are_not_retried(tables, allow_list, tenant, name, kind):
    outcome, run = run_once(sql_job(tenant, name, max_attempts=5))

    assert (outcome.state, run.attempt) == ("failed", 1)
    assert run.error.startswith(f"{kind}: "), run.error


def test_a_permission_error_is_not_retried(tables, allow_list):
    """The tests connect as a superuser; the error comes from a role without privileges."""
    alias = tables
    if vendor(alias) == "postgresql":
        role = f"cf_sqljobs_noperm_{os.getpid()}"
        execute(alias, f"CREATE ROLE {role}")
        try:
            with pytest.raises(Exception) as caught, connections[alias].cursor() as cursor:
                cursor.execute(f"SET ROLE {role}")
                cursor.execute("SELECT * FROM sqljob_items")
        finally:
            execute(alias, "RESET ROLE")
            execute(alias, f"DROP ROLE {role}")
    else:
        user = f"cf_noperm_{os.getpid()}"
        execute(alias, f"CREATE USER '{user}'@'127.0.0.1'")
        try:
            import MySQLdb

            db = settings.DATABASES[alias]
            other = MySQLdb.connect(host="127.0.0.1", port=int(db["PORT"]), user=user, connect_timeout=5)
            with pytest.raises(Exception) as caught:
                other.cursor().execute(f"SELECT * FROM {connections[alias].settings_dict['NAME']}.sqljob_items")
            other.close()
        finally:
            execute(alias, f"DROP USER '{user}'@'127.0.0.1'")

    error = sqljobs.classify_error(caught.value, vendor(alias))
    assert (error.kind, error.retryable) == ("permission_denied", False), error


def test_a_database_that_does_not_answer_is_retried(tables, allow_list, tenant):
    """The statement's own connection fails (a port nobody listens on); on PostgreSQL that
    connection is the worker's own, so there the real driver's error is classified."""
    if vendor(tables) == "postgresql":
        import psycopg

        with pytest.raises(psycopg.OperationalError) as caught:
            psycopg.connect("postgresql://postgres@127.0.0.1:9/x", connect_timeout=2)
        error = sqljobs.classify_error(caught.value, "postgresql")
        assert (error.kind, error.retryable) == ("connection_error", True), error
        return
    job = sql_job(tenant, "items")
    connection = connections[tables]
    connection.close()
    port = connection.settings_dict["PORT"]
    connection.settings_dict["PORT"] = 9
    try:
        outcome, run = run_once(job)
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port

    assert (outcome.state, run.state) == ("retrying", "retrying")
    assert run.error.startswith("connection_error: error 2002: "), run.error


def test_a_statement_removed_from_the_allow_list_fails_permanently(tables, allow_list, tenant, settings):
    job = sql_job(tenant, "items")
    del settings.CRONFLEET_SQL["items"]

    outcome, run = run_once(job)

    assert (outcome.state, run.error) == (
        "failed",
        "invalid_sql: sql.name: 'items' is not a statement in CRONFLEET_SQL",
    )
    assert (run.attempt, run.result) == (1, "")  # refused before it ran: nothing to report


def test_parameters_are_checked_again_when_the_declaration_changed(tables, allow_list, tenant, settings):
    job = sql_job(tenant, "items", {"first": 2})
    settings.CRONFLEET_SQL["items"]["params"]["first"]["max"] = 1

    outcome, run = run_once(job)

    assert outcome.state == "failed" and run.error == "invalid_sql: sql.params.first: must be <= 1"
    assert (run.attempt, run.result) == (1, "")


# --- results ------------------------------------------------------------------------------


def test_rows_stop_at_the_row_cap(tables, allow_list, tenant):
    outcome, run = run_once(sql_job(tenant, "many"))

    result = result_of(run)
    assert result["columns"] == ["n", "pad"] and result["rows_affected"] == 50
    assert [row[0] for row in result["rows"]] == list(range(1, 11)) and result["truncated"] is True
    assert result["statement"] == "many" and result["database"] == tables and result["elapsed_ms"] >= 0


def test_rows_stop_where_the_result_would_outgrow_its_bytes(tables, allow_list, tenant, settings):
    settings.CRONFLEET_RESULT_MAX_BYTES = 400

    outcome, run = run_once(sql_job(tenant, "many"))

    result = result_of(run)  # still valid JSON: whole rows were left out
    assert len(run.result.encode()) <= 400
    assert result["truncated"] is True and 1 <= len(result["rows"]) < 10
    assert [row[0] for row in result["rows"]] == list(range(1, len(result["rows"]) + 1))
