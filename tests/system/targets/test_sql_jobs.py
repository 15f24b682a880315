"""SQL jobs' allow-list and databases at start-up: bad settings (CRONFLEET_SQL,
CRONFLEET_SQL_DATABASES) stop a fresh process naming the statement and the key; an extra alias is
a database Cronfleet never migrates into. The checks themselves are tests/unit/targets/test_sql_jobs.py."""

from __future__ import annotations

import json

import pytest

from tests.system.deploy.test_settings import check_settings


def test_a_broken_allow_list_stops_start_up_naming_the_statement_and_key():
    bad = {"nightly": {"database": "default", "sql": "DELETE FROM x WHERE day < %(before)s"}}
    done = check_settings(CRONFLEET_SQL=json.dumps(bad))

    assert done.returncode != 0
    assert "ImproperlyConfigured: CRONFLEET_SQL.nightly.sql: %(before)s is not a declared parameter" in done.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CRONFLEET_SQL": "{nope"}, "CRONFLEET_SQL must be JSON"),
        ({"CRONFLEET_SQL": "[]"}, "CRONFLEET_SQL must be a JSON object"),
        ({"CRONFLEET_SQL_DATABASES": "{nope"}, "CRONFLEET_SQL_DATABASES must be JSON"),
        (
            {"CRONFLEET_SQL_DATABASES": '{"default": "postgres://x@127.0.0.1/y"}'},
            "CRONFLEET_SQL_DATABASES.default: an alias must be an identifier other than default",
        ),
        (
            {"CRONFLEET_SQL_DATABASES": '{"files": "sqlite:///tmp/x.db"}'},
            "CRONFLEET_SQL_DATABASES.files: SQL jobs run on PostgreSQL",
        ),
        ({"CRONFLEET_SQL_DATABASES": '{"odd": "gopher://x"}'}, "CRONFLEET_SQL_DATABASES.odd: not a valid database URL"),
        (
            {"CRONFLEET_SQL": json.dumps({"r": {"database": "reporting", "sql": "SELECT 1"}})},
            "CRONFLEET_SQL.r.database: unknown database alias 'reporting'",
        ),
    ],
)
def test_bad_sql_settings_stop_start_up(env, message):
    done = check_settings(**env)

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and message in done.stderr, done.stderr[-2000:]


def test_an_extra_alias_is_a_database_cronfleet_never_migrates_into():
    done = check_settings(
        CRONFLEET_SQL_DATABASES=json.dumps({"reporting": "postgres://reader@127.0.0.1:5432/reports"}),
        CRONFLEET_SQL=json.dumps({"count": {"database": "reporting", "sql": "SELECT count(*) FROM orders"}}),
        script="from django.conf import settings; from django.db import router; "
        "from scheduler_app.models import Job\n"
        "print(settings.DATABASES['reporting']['NAME'], settings.DATABASES['reporting']['USER'])\n"
        "print(router.allow_migrate_model('reporting', Job), router.allow_migrate_model('default', Job))",
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["reports", "reader", "False", "True"]
