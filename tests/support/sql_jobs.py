"""What SQL jobs' tests run on (tests/integration/targets/test_sql_running.py and test_sql_bounds.py,
tests/system/targets/test_sql_running.py): the real PostgreSQL and MariaDB, the tables, the
allow-list, and a run through the worker code.

A test that takes the `alias` fixture runs once on PostgreSQL (the "default" alias) and once on
MariaDB (the "mariadb" alias that tests/settings.py adds through CRONFLEET_SQL_DATABASES).
MariaDB's runs are skipped, saying why, only when MariaDB does not answer and this is not CI;
with CI=true they fail instead. The fixtures (alias, tables, allow_list) are used by name: import
them into the test module.
"""

from __future__ import annotations

import json
import os

import pytest
from django.conf import settings
from django.db import connections

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState
from scheduler_app.targets import sql as sqljobs
from scheduler_app.worker import execution
from tests.conftest import NOW


def _mariadb_problem() -> str | None:
    db = settings.DATABASES.get("mariadb")
    if db is None:
        return "DATABASES has no 'mariadb' alias (CRONFLEET_SQL_DATABASES)"
    try:
        import MySQLdb

        MySQLdb.connect(
            host=db["HOST"] or "127.0.0.1",
            port=int(db["PORT"] or 3306),
            user=db["USER"],
            password=db["PASSWORD"],
            connect_timeout=3,
        ).close()
    except Exception as exc:  # noqa: BLE001 - any reason is the skip's reason
        return f"MariaDB is not reachable at {db['HOST']}:{db['PORT']} ({exc})"
    return None


MARIADB_PROBLEM = _mariadb_problem()
IN_CI = os.environ.get("CI") == "true"


def _backends():
    pg = pytest.param("default", id="postgresql", marks=pytest.mark.django_db(transaction=True))
    if MARIADB_PROBLEM is None:
        maria = pytest.param(
            "mariadb", id="mariadb", marks=pytest.mark.django_db(transaction=True, databases=["default", "mariadb"])
        )
    elif IN_CI:  # the `alias` fixture fails the test, naming the problem
        maria = pytest.param("mariadb", id="mariadb", marks=pytest.mark.django_db(transaction=True))
    else:
        maria = pytest.param(
            "mariadb",
            id="mariadb",
            marks=pytest.mark.skip(reason=f"{MARIADB_PROBLEM}; these tests must pass where CI=true"),
        )
    return [pg, maria]


BACKENDS = _backends()


@pytest.fixture(params=BACKENDS)
def alias(request) -> str:
    if request.param == "mariadb" and MARIADB_PROBLEM is not None:
        pytest.fail(f"CI=true and {MARIADB_PROBLEM}")
    return request.param


def vendor(alias: str) -> str:
    return sqljobs.vendor_of(settings.DATABASES[alias])


TABLE = {
    "postgresql": "CREATE TABLE sqljob_items (id integer PRIMARY KEY, name varchar(200) NOT NULL DEFAULT '', "
    "note text, n integer NOT NULL DEFAULT 0)",
    "mysql": "CREATE TABLE sqljob_items (id integer PRIMARY KEY, name varchar(200) NOT NULL DEFAULT '', "
    "note text, n integer NOT NULL DEFAULT 0) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
}
FIRES = {
    "postgresql": "CREATE TABLE sqljob_fires (fire_key varchar(100) PRIMARY KEY, scheduled_at timestamptz, "
    "attempt integer, tenant varchar(100), hits integer NOT NULL DEFAULT 1)",
    "mysql": "CREATE TABLE sqljob_fires (fire_key varchar(100) PRIMARY KEY, scheduled_at datetime(6), "
    "attempt integer, tenant varchar(100), hits integer NOT NULL DEFAULT 1) ENGINE=InnoDB",
}


def execute(alias: str, sql: str, params=None) -> list:
    """Run `sql` on the alias outside any SQL job (autocommit); its rows, if any."""
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


@pytest.fixture
def tables(alias):
    for name, ddl in (("sqljob_items", TABLE), ("sqljob_fires", FIRES)):
        execute(alias, f"DROP TABLE IF EXISTS {name}")
        execute(alias, ddl[vendor(alias)])
    execute(alias, "INSERT INTO sqljob_items (id, name) VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    yield alias
    for name in ("sqljob_items", "sqljob_fires"):
        execute(alias, f"DROP TABLE IF EXISTS {name}")


def statements(alias: str) -> dict:
    """The allow-list the tests use, on `alias`."""
    pg = vendor(alias) == "postgresql"
    return {
        "add_item": {
            "database": alias,
            "read_only": False,
            "sql": "INSERT INTO sqljob_items (id, name, note) VALUES (%(id)s, %(name)s, %(note)s)",
            "params": {
                "id": {"type": "int", "min": 1},
                "name": {"type": "str", "max_length": 200},
                "note": {"type": "str", "max_length": 1000, "default": ""},
            },
        },
        "items": {
            "database": alias,
            "max_rows": 10,
            "sql": "SELECT id, name, note FROM sqljob_items WHERE id >= %(first)s ORDER BY id",
            "params": {"first": {"type": "int", "default": 0}},
        },
        "named": {
            "database": alias,
            "sql": (
                "SELECT id FROM sqljob_items WHERE name = ANY(%(names)s) AND id = ANY(%(ids)s) ORDER BY id"
                if pg
                else "SELECT id FROM sqljob_items WHERE name IN %(names)s AND id IN %(ids)s ORDER BY id"
            ),
            "params": {
                "names": {"type": "str_list", "max_items": 5, "max_length": 50},
                "ids": {"type": "int_list", "max_items": 5},
            },
        },
        "sneaky_write": {"database": alias, "sql": "UPDATE sqljob_items SET n = n + 1"},  # read-only by default
        "bump": {"database": alias, "read_only": False, "sql": "UPDATE sqljob_items SET n = n + 1"},
        "slow": {
            "database": alias,
            "timeout": 0.3,
            "sql": "SELECT pg_sleep(%(seconds)s)" if pg else "SELECT SLEEP(%(seconds)s)",
            "params": {"seconds": {"type": "float", "max": 10}},
        },
        "lock_rows": {
            "database": alias,
            "read_only": False,
            "timeout": 10,
            "sql": (
                "SELECT id FROM sqljob_items WHERE id = ANY(%(ids)s) ORDER BY id DESC FOR UPDATE"
                if pg
                else "SELECT id FROM sqljob_items WHERE id IN %(ids)s ORDER BY id DESC FOR UPDATE"
            ),
            "params": {"ids": {"type": "int_list", "max_items": 5}},
        },
        "bump_one": {
            "database": alias,
            "read_only": False,
            "timeout": 10,
            "isolation": "repeatable_read",
            "sql": "UPDATE sqljob_items SET n = n + 1 WHERE id = %(id)s",
            "params": {"id": {"type": "int"}},
        },
        "record_fire": {
            "database": alias,
            "read_only": False,
            "sql": (
                "INSERT INTO sqljob_fires (fire_key, scheduled_at, attempt, tenant) "
                "VALUES (%(fire_key)s, %(scheduled_at)s, %(attempt)s, %(tenant)s) "
                + (
                    "ON CONFLICT (fire_key) DO UPDATE SET hits = sqljob_fires.hits + 1"
                    if pg
                    else "ON DUPLICATE KEY UPDATE hits = hits + 1"
                )
            ),
        },
        "typed": {
            "database": alias,
            "sql": "SELECT %(i)s, %(f)s, %(b)s, %(d)s, %(t)s",
            "params": {
                "i": {"type": "int"},
                "f": {"type": "float"},
                "b": {"type": "bool"},
                "d": {"type": "date"},
                "t": {"type": "datetime"},
            },
        },
        "many": {
            "database": alias,
            "max_rows": 10,
            "sql": (
                "SELECT g AS n, repeat('x', 40) AS pad FROM generate_series(1, 50) AS g"
                if pg
                else "SELECT seq AS n, REPEAT('x', 40) AS pad FROM seq_1_to_50"
            ),
        },
        "broken": {"database": alias, "sql": "SELEC 1"},
        "missing_table": {"database": alias, "sql": "SELECT * FROM sqljob_nowhere"},
        "percent": {"database": alias, "sql": "SELECT name FROM sqljob_items WHERE name LIKE 't%%' ORDER BY id ;\n"},
    }


@pytest.fixture
def allow_list(settings, alias):
    settings.CRONFLEET_SQL = statements(alias)
    return settings.CRONFLEET_SQL


def sql_job(tenant, statement: str, params: dict | None = None, **fields) -> Job:
    fields.setdefault("name", f"sql-{statement}")
    return services.job_create(
        tenant,
        services.JobSpec(target_kind="sql", every=3600, sql={"name": statement, "params": params or {}}, **fields),
    )


def run_once(job: Job, *, attempt: int = 1, run: JobRun | None = None):
    """Execute the job's run as a worker would (attempt 1, or the given run's next attempt)."""
    if run is None:
        run = JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=NOW, created_at=NOW, state=RunState.QUEUED)
    else:
        JobRun.objects.filter(id=run.id).update(state=RunState.QUEUED, attempt=attempt)
    outcome = execution.execute_run(run.id, attempt, worker="w")
    run.refresh_from_db()
    return outcome, run


def result_of(run: JobRun) -> dict:
    return json.loads(run.result)
