"""A SQL job runs end to end through a real worker, once on PostgreSQL and once on MariaDB (the
fixtures and helpers are tests/support/sql_jobs.py's; MariaDB's run is skipped, saying why, only
when MariaDB does not answer and this is not CI)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.db import connections

from scheduler_app import services
from scheduler_app.models import JobRun, RunState
from tests.conftest import wait_for
from tests.support.sql_jobs import (  # noqa: F401 - alias, allow_list, tables: fixtures used by name
    alias,
    allow_list,
    execute,
    result_of,
    sql_job,
    tables,
)


@pytest.mark.slow
def test_a_sql_job_runs_end_to_end_through_a_real_worker(tables, allow_list, tenant, processes, queue_name):
    alias = tables
    env = {"CRONFLEET_SQL": json.dumps(allow_list)}
    if alias == "mariadb":  # the worker reaches this test's MariaDB database through the same alias
        db = connections[alias].settings_dict
        login = quote(db["USER"], safe="") + (f":{quote(db['PASSWORD'], safe='')}" if db["PASSWORD"] else "")
        env["CRONFLEET_SQL_DATABASES"] = json.dumps(
            {"mariadb": f"mysql://{login}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}
        )
    job = sql_job(tenant, "add_item", {"id": 42, "name": "'; DROP TABLE sqljob_items; --"}, queue=queue_name)
    fired = sql_job(tenant, "record_fire", name="fire", queue=queue_name)
    processes.worker(queue_name, **env)

    runs = [services.job_trigger(job, actor="test"), services.job_trigger(fired, actor="test")]

    for run in runs:
        wait_for(
            lambda run=run: JobRun.objects.filter(id=run.id, finished_at__isnull=False).exists(),
            timeout=60,
            what="the SQL run to finish",
        )
        run.refresh_from_db()
        assert run.state == RunState.SUCCEEDED, (run.error, processes.log("worker"))
        assert result_of(run)["rows_affected"] == 1
    assert execute(alias, "SELECT name FROM sqljob_items WHERE id = 42") == [("'; DROP TABLE sqljob_items; --",)]
    assert execute(alias, "SELECT fire_key, attempt FROM sqljob_fires") == [(runs[1].fire_key, 1)]
