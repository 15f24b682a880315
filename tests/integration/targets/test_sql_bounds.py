"""SQL jobs' bounds, on the real PostgreSQL and MariaDB through the worker code: a result
far larger than max_rows is never held by the worker; nothing a run leaves in its session
(advisory and named locks, settings, temporary tables) reaches the next run on the same
connection; a statement restricted to some tenants is refused to the others' jobs.

The fixtures (one run per backend, the tables, the allow-list) are tests/support/sql_jobs.py's.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from scheduler_app import services
from scheduler_app.models import Job, Tenant
from scheduler_app.targets import sql as sqljobs
from tests.conftest import NOW
from tests.support.sql_jobs import (  # noqa: F401 - alias, tables: fixtures used by name
    BACKENDS,
    alias,
    execute,
    result_of,
    run_once,
    sql_job,
    statements,
    tables,
    vendor,
)

SERIES = 3_000_000  # rows of the big query: ~440 MB of worker memory when fetched whole (issue 22)
FILLED = 300_000  # rows a write returns: ~70 MB fetched whole, far more than the run keeps


def bounds_statements(alias: str) -> dict:
    pg = vendor(alias) == "postgresql"
    return {
        "series": {
            "database": alias,
            "max_rows": 5,
            "params": {"n": {"type": "int"}},
            "sql": (
                "SELECT g FROM generate_series(1, %(n)s) AS g"
                if pg
                else "SELECT seq FROM seq_1_to_3000000 WHERE seq <= %(n)s"
            ),
        },
        "fill": {
            "database": alias,
            "read_only": False,
            "max_rows": 5,
            "params": {"n": {"type": "int"}},
            "sql": (
                "INSERT INTO sqljob_wide (id, pad) SELECT g, repeat('x', 200) FROM generate_series(1, %(n)s) "
                "AS g RETURNING id, pad"
                if pg
                else "INSERT INTO sqljob_wide (id, pad) SELECT seq, REPEAT('x', 200) FROM seq_1_to_3000000 "
                "WHERE seq <= %(n)s RETURNING id, pad"
            ),
        },
        "lock": {
            "database": alias,
            "params": {"key": {"type": "int"}},  # read-only, as by default
            "sql": "SELECT pg_advisory_lock(%(key)s)" if pg else "SELECT GET_LOCK(CONCAT('cf', %(key)s), 0)",
        },
        "remember": {
            "database": alias,
            "params": {"value": {"type": "str", "max_length": 50}},
            "sql": (
                "SELECT set_config('cronfleet.remembered', %(value)s, false)"
                if pg
                else "SELECT @cronfleet_remembered := %(value)s"
            ),
        },
        "recall": {
            "database": alias,
            "sql": ("SELECT current_setting('cronfleet.remembered', true)" if pg else "SELECT @cronfleet_remembered"),
        },
        "make_scratch": {
            "database": alias,
            "read_only": False,
            "sql": "CREATE TEMPORARY TABLE sqljob_scratch (a integer)",
        },
        "read_scratch": {"database": alias, "sql": "SELECT count(*) FROM sqljob_scratch"},
    }


@pytest.fixture
def allow_list(settings, tables):
    settings.CRONFLEET_SQL = {**statements(tables), **bounds_statements(tables)}
    return settings.CRONFLEET_SQL


@pytest.fixture
def wide(tables):
    """A table the "fill" statement writes to."""
    execute(tables, "DROP TABLE IF EXISTS sqljob_wide")
    execute(tables, "CREATE TABLE sqljob_wide (id integer PRIMARY KEY, pad varchar(300) NOT NULL)")
    yield tables
    execute(tables, "DROP TABLE IF EXISTS sqljob_wide")


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def peak_memory_growth(work) -> int:
    """How far this process's peak resident memory rose above its resident memory before
    `work()` (MiB). Linux: writing 5 to /proc/self/clear_refs resets the peak (VmHWM) to now."""
    clear_refs = Path("/proc/self/clear_refs")
    if not clear_refs.exists():
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak resident memory")
    clear_refs.write_text("5")
    before = _kib("VmRSS")
    work()
    return (_kib("VmHWM") - before) // 1024


class ResultSpy(psycopg.Cursor):
    """psycopg's own Cursor on the real connection, noting how many rows each result that
    reached the client held (what libpq received and stored, before any fetch)."""

    results: list[int] = []

    def _set_results(self, results):
        ResultSpy.results.extend(result.ntuples for result in results)
        super()._set_results(results)


@pytest.fixture
def spy(monkeypatch):
    ResultSpy.results = []
    monkeypatch.setattr(psycopg, "Cursor", ResultSpy)  # the runner makes its cursor as psycopg.Cursor(...)
    return ResultSpy.results


# --- a result far larger than max_rows -------------------------------------------------------------


def test_a_query_of_millions_of_rows_keeps_max_rows_and_never_holds_the_rest(allow_list, tenant, spy):
    job = sql_job(tenant, "series", {"n": SERIES})
    ran = []

    growth = peak_memory_growth(lambda: ran.append(run_once(job)))

    [(outcome, run)] = ran
    assert outcome.state == "succeeded", run.error
    result = result_of(run)
    assert [row[0] for row in result["rows"]] == [1, 2, 3, 4, 5] and result["truncated"] is True
    assert result["rows_affected"] == SERIES  # every row was produced, counted in the server
    assert growth < 20, f"the worker's peak memory grew by {growth} MiB for {SERIES} rows"
    if vendor(allow_list["series"]["database"]) == "postgresql":
        assert max(spy) <= 5 + 1, spy  # no result that reached the worker held more than max_rows + 1


def test_a_write_returning_many_rows_completes_and_keeps_max_rows(allow_list, tenant, wide, spy):
    job = sql_job(tenant, "fill", {"n": FILLED})
    ran = []

    growth = peak_memory_growth(lambda: ran.append(run_once(job)))

    [(outcome, run)] = ran
    assert outcome.state == "succeeded", run.error
    result = result_of(run)
    assert result["columns"] == ["id", "pad"] and len(result["rows"]) == 5 and result["truncated"] is True
    assert result["rows_affected"] == FILLED
    assert execute(wide, "SELECT count(*) FROM sqljob_wide")[0][0] == FILLED  # the write ran to its end
    assert growth < 20, f"the worker's peak memory grew by {growth} MiB for {FILLED} returned rows"
    if vendor(wide) == "postgresql":
        assert max(spy) <= 5 + 1, spy


def test_a_result_of_max_rows_is_whole_and_one_more_row_is_truncated(allow_list, tenant, wide):
    """The edges of the bound (passes on the old code too: it guards the counting)."""
    runs = [run_once(sql_job(tenant, "series", {"n": n}, name=f"series-{n}"))[1] for n in (5, 6)]
    filled, fill_run = run_once(sql_job(tenant, "fill", {"n": 3}))

    exactly, one_more = (result_of(run) for run in runs)
    assert (exactly["rows"], exactly["truncated"], exactly["rows_affected"]) == ([[1], [2], [3], [4], [5]], False, 5)
    assert (len(one_more["rows"]), one_more["truncated"], one_more["rows_affected"]) == (5, True, 6)
    assert (result_of(fill_run)["rows_affected"], result_of(fill_run)["truncated"]) == (3, False)
    assert [row[0] for row in result_of(fill_run)["rows"]] == [1, 2, 3]


# --- the session is reset after each run ---------------------------------------------------------


def test_an_advisory_lock_taken_in_a_read_only_run_is_not_held_after_it(allow_list, tenant):
    alias = allow_list["lock"]["database"]
    outcome, run = run_once(sql_job(tenant, "lock", {"key": 4242}))
    assert outcome.state == "succeeded", run.error

    if vendor(alias) == "postgresql":  # the worker's connection is this one ("default"): it sees its own locks
        held = execute(alias, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242")[0][0]
    else:  # IS_FREE_LOCK is 0 while any session, this one included, holds it
        held = 1 - execute(alias, "SELECT IS_FREE_LOCK('cf4242')")[0][0]
    assert held == 0


def test_a_setting_made_in_a_run_does_not_reach_the_next_run_on_the_connection(allow_list, tenant):
    remembered, run = run_once(sql_job(tenant, "remember", {"value": "tenant-one-secret"}))
    assert remembered.state == "succeeded", run.error

    outcome, run = run_once(sql_job(tenant, "recall"))

    assert outcome.state == "succeeded", run.error
    assert result_of(run)["rows"] in ([[None]], [[""]]), result_of(run)


def test_a_temporary_table_made_in_a_run_is_gone_in_the_next(allow_list, tenant):
    made, run = run_once(sql_job(tenant, "make_scratch"))
    assert made.state == "succeeded", run.error

    outcome, run = run_once(sql_job(tenant, "read_scratch"))

    assert outcome.state == "failed" and run.error.startswith("undefined_object: "), run.error


@pytest.mark.parametrize("alias", [BACKENDS[0]])
def test_the_worker_s_prepared_statements_work_after_sessions_were_reset(allow_list, tenant):
    """Passes on the old code too, which reset nothing: it guards the reset. psycopg notices
    that DISCARD ALL dropped its prepared statements only when it has not counted the
    command's text yet; a reset while nothing was prepared leaves it counted, and the
    worker's next start or end of a run would name a statement the server no longer has,
    unless the reset makes psycopg forget them every time."""
    connections["default"].close()  # a new session
    jobs = [sql_job(tenant, "recall", name=f"recall-{number}") for number in range(4)]
    fire = {"fire_key": "k", "scheduled_at": NOW, "attempt": 1, "tenant": tenant.slug}
    outcomes = [run_once(jobs[0])[0].state]  # the worker prepares its statements
    for _ in range(2):  # resets with nothing prepared
        sqljobs.run_statement(
            "recall", {}, config=allow_list, databases=settings.DATABASES, fire=fire, job_timeout=10, max_bytes=8192
        )

    outcomes += [run_once(job)[0].state for job in jobs[1:]]

    assert outcomes == ["succeeded"] * 4


# --- a statement for some tenants only -----------------------------------------------------------


def test_a_statement_for_some_tenants_is_refused_to_another_tenant_s_job(allow_list, tenant, settings):
    other = Tenant.objects.create(slug=f"{tenant.slug}-other", name="Another tenant")
    theirs = sql_job(other, "items", max_attempts=3)
    settings.CRONFLEET_SQL["items"]["tenants"] = [tenant.slug]  # narrowed after the job was saved

    outcome, run = run_once(theirs)
    own, own_run = run_once(sql_job(tenant, "items"))

    assert (outcome.state, run.attempt) == ("failed", 1)  # not retried: no attempt can fix it
    assert run.error == (
        f"invalid_sql: sql.name: statement 'items' is not allowed for tenant {other.slug!r} "
        "(CRONFLEET_SQL.items.tenants)"
    )
    assert own.state == "succeeded" and result_of(own_run)["rows"][0] == [1, "one", None]


def test_another_tenant_s_job_naming_a_statement_not_theirs_is_refused_when_saved(allow_list, tenant, settings):
    settings.CRONFLEET_SQL["items"]["tenants"] = [tenant.slug]
    other = Tenant.objects.create(slug=f"{tenant.slug}-other", name="Another tenant")

    with pytest.raises(services.InvalidInput) as caught:
        sql_job(other, "items")

    assert caught.value.field == "sql.name" and "not allowed for tenant" in caught.value.message
    assert not Job.objects.filter(tenant=other).exists()
    assert sql_job(tenant, "items").target_config["name"] == "items"  # its own tenant saves it
