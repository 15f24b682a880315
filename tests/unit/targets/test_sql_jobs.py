"""SQL jobs' allow-list and parameters, checked with no database: a bad entry is refused naming
the statement and the key, a bad parameter naming the parameter; good ones are kept as JSON and
bound as the driver's types. At start-up: tests/system/targets/test_sql_jobs.py; at save
(services, API, CLI) and shown by the admin: tests/integration/targets/test_sql_jobs.py. Running
statements is tests/integration/targets/test_sql_running.py."""

from __future__ import annotations

import copy
from datetime import UTC, date, datetime

import pytest

from scheduler_app import services
from scheduler_app.targets import sql as sqljobs

DATABASES = {
    "default": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"},
    "maria": {"ENGINE": "django.db.backends.mysql", "NAME": "y"},
    "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": "z"},
}
REPORT = {
    "database": "default",
    "sql": "SELECT * FROM orders WHERE day = %(day)s AND region = ANY(%(regions)s) AND total > %(min_total)s "
    "AND %(fire_key)s IS NOT NULL",
    "params": {
        "day": {"type": "date"},
        "regions": {"type": "str_list", "max_items": 3, "max_length": 10},
        "min_total": {"type": "float", "min": 0, "default": 0},
    },
    "timeout": 5,
    "max_rows": 20,
}
TYPED = {
    "database": "default",
    "sql": "SELECT %(i)s, %(f)s, %(b)s, %(s)s, %(c)s, %(d)s, %(t)s, %(il)s, %(sl)s",
    "params": {
        "i": {"type": "int", "min": 1, "max": 10},
        "f": {"type": "float", "max": 1.5},
        "b": {"type": "bool"},
        "s": {"type": "str", "max_length": 5, "pattern": "[a-z]+"},
        "c": {"type": "choice", "choices": ["eu", "us"]},
        "d": {"type": "date"},
        "t": {"type": "datetime"},
        "il": {"type": "int_list", "max_items": 2, "min": 0},
        "sl": {"type": "str_list", "max_items": 2, "max_length": 3},
    },
}
GOOD = {
    "i": 3,
    "f": 1.5,
    "b": False,
    "s": "abc",
    "c": "eu",
    "d": "2024-02-29",
    "t": "2024-01-01T01:00:00+01:00",
    "il": [0, 7],
    "sl": ["a", "bcd"],
}


def config(**entries) -> dict:
    return {"report": copy.deepcopy(REPORT), **entries}


def with_changes(**changes) -> dict:
    entry = copy.deepcopy(REPORT)
    for key, value in changes.items():
        if value is None:
            entry.pop(key)
        else:
            entry[key] = value
    return {"report": entry}


# --- the allow-list --------------------------------------------------------------------------


def test_a_good_allow_list_is_accepted():
    good = config(typed=TYPED)
    assert sqljobs.validate_config(good, DATABASES) is None
    report = sqljobs.statement("report", good, DATABASES)
    assert (report.name, report.database, report.vendor, report.sql) == (
        "report",
        "default",
        "postgresql",
        REPORT["sql"],
    )
    assert (report.timeout, report.max_rows, set(report.params)) == (5, 20, {"day", "regions", "min_total"})
    assert set(sqljobs.statement("typed", good, DATABASES).params) == set(TYPED["params"])
    # An empty allow-list has nothing to check, and then no statement to run.
    assert sqljobs.validate_config({}, DATABASES) is None
    with pytest.raises(sqljobs.InvalidSql) as caught:
        sqljobs.statement("report", {}, DATABASES)
    assert caught.value.field == "name", caught.value


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"database": "reports"}, "CRONFLEET_SQL.report.database", "unknown database alias 'reports'"),
        ({"database": "lite"}, "CRONFLEET_SQL.report.database", "SQL jobs run on PostgreSQL or MariaDB"),
        ({"database": None}, "CRONFLEET_SQL.report.database", "is required"),
        ({"sql": ""}, "CRONFLEET_SQL.report.sql", "is required"),
        (
            {"sql": "SELECT %(day)s, %(regions)s, %(min_total)s, %(nope)s"},
            "CRONFLEET_SQL.report.sql",
            "%(nope)s is not a declared parameter",
        ),
        (
            {"sql": "SELECT %(day)s, %(regions)s"},
            "CRONFLEET_SQL.report.params.min_total",
            "is declared but the SQL does not use %(min_total)s",
        ),
        (
            {"sql": "SELECT %(day)s, %(regions)s, %(min_total)s, %s"},
            "CRONFLEET_SQL.report.sql",
            "positional %s placeholders are not accepted",
        ),
        (
            {"sql": "SELECT %(day)s, %(regions)s, %(min_total)s WHERE a LIKE 'x%'"},
            "CRONFLEET_SQL.report.sql",
            "neither %(name)s nor %%",
        ),
        (
            {"sql": "SELECT %(day)s, %(regions)s, %(min_total)s; DROP TABLE orders"},
            "CRONFLEET_SQL.report.sql",
            "must be one statement",
        ),
        (
            {"params": {"day": {"type": "date"}, "regions": {"type": "text"}, "min_total": {"type": "float"}}},
            "CRONFLEET_SQL.report.params.regions.type",
            "unsupported type 'text'",
        ),
        (  # a type that is no string (a list, a mapping) gets the same answer, not a TypeError
            {"params": {"day": {"type": ["date"]}, "regions": {"type": "text"}, "min_total": {"type": "float"}}},
            "CRONFLEET_SQL.report.params.day.type",
            "unsupported type ['date']",
        ),
        (
            {
                "params": {"day": {"type": "date"}, "regions": {"type": "str_list", "max_items": 3}},
                "sql": "SELECT %(day)s, %(regions)s",
            },
            "CRONFLEET_SQL.report.params.regions.max_length",
            "is required",
        ),
        (
            {"params": {"day": {"type": "date", "min": 1}}, "sql": "SELECT %(day)s"},
            "CRONFLEET_SQL.report.params.day.min",
            "unknown key for type date",
        ),
        (
            {"params": {"day": {"type": "date", "default": "tomorrow"}}, "sql": "SELECT %(day)s"},
            "CRONFLEET_SQL.report.params.day.default",
            "must be an ISO date",
        ),
        (
            {"params": {"fire_key": {"type": "str", "max_length": 9}}, "sql": "SELECT %(fire_key)s"},
            "CRONFLEET_SQL.report.params.fire_key",
            "is reserved",
        ),
        ({"timeout": 0}, "CRONFLEET_SQL.report.timeout", "must be between 0.01 and 3600 seconds"),
        ({"timeout": 3601}, "CRONFLEET_SQL.report.timeout", "must be between 0.01 and 3600 seconds"),
        ({"timeout": "5"}, "CRONFLEET_SQL.report.timeout", "must be between 0.01 and 3600 seconds"),
        ({"timeout": 10**400}, "CRONFLEET_SQL.report.timeout", "must be between 0.01 and 3600 seconds"),
        (
            {"params": {"day": {"type": "datetime", "default": "9999-12-31T23:59:59-23:59"}}, "sql": "SELECT %(day)s"},
            "CRONFLEET_SQL.report.params.day.default",
            "is out of range: in UTC it falls outside the years 1-9999",
        ),
        (
            {"params": {"day": {"type": "float", "default": 10**400}}, "sql": "SELECT %(day)s"},
            "CRONFLEET_SQL.report.params.day.default",
            "is out of range for a float",
        ),
        ({"tenants": []}, "CRONFLEET_SQL.report.tenants", "must be a non-empty list of tenant slugs"),
        ({"tenants": "acme"}, "CRONFLEET_SQL.report.tenants", "must be a non-empty list of tenant slugs"),
        ({"tenants": ["acme", "not a slug"]}, "CRONFLEET_SQL.report.tenants[1]", "must be a tenant's slug"),
        ({"max_rows": 10_001}, "CRONFLEET_SQL.report.max_rows", "from 0 to 10000"),
        ({"read_only": "no"}, "CRONFLEET_SQL.report.read_only", "must be true or false"),
        ({"isolation": "snapshot"}, "CRONFLEET_SQL.report.isolation", "must be one of read_committed"),
        ({"readonly": True}, "CRONFLEET_SQL.report.readonly", "unknown key"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_statement_and_key(changes, field, message):
    with pytest.raises(sqljobs.InvalidSql) as caught:
        sqljobs.validate_config(with_changes(**changes), DATABASES)

    assert caught.value.field == field, caught.value
    assert message in caught.value.message, caught.value


def test_an_empty_list_is_refused_on_mariadb_only():
    entry = {**REPORT, "database": "maria"}
    stmt = sqljobs.check_entry("report", entry, DATABASES)
    with pytest.raises(sqljobs.InvalidSql, match="must not be empty on MariaDB"):
        sqljobs.check_params(stmt, {"day": "2024-01-01", "regions": []})
    pg = sqljobs.check_entry("report", REPORT, DATABASES)
    assert sqljobs.check_params(pg, {"day": "2024-01-01", "regions": []})["regions"] == []


# --- parameters --------------------------------------------------------------------------------


def typed() -> sqljobs.Statement:
    return sqljobs.check_entry("typed", TYPED, DATABASES)


def test_good_parameters_are_kept_as_json_with_instants_in_utc():
    assert sqljobs.check_params(typed(), GOOD) == {**GOOD, "t": "2024-01-01T00:00:00+00:00"}


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"i": 11}, "params.i", "must be <= 10"),
        ({"i": "3"}, "params.i", "must be an integer"),
        ({"i": True}, "params.i", "must be an integer"),
        ({"i": 2**63}, "params.i", "must fit in 64 bits"),
        ({"f": float("nan")}, "params.f", "must be a finite number"),
        ({"f": 2}, "params.f", "must be <= 1.5"),
        ({"b": "true"}, "params.b", "must be true or false"),
        ({"s": "abcdef"}, "params.s", "is longer than 5 characters"),
        ({"s": "ab1"}, "params.s", "does not match the allowed pattern"),
        ({"s": "a\x00b"}, "params.s", "contains a NUL character (U+0000)"),
        ({"s": "a\ud800"}, "params.s", "lone surrogate"),
        ({"c": "asia"}, "params.c", "must be one of ['eu', 'us']"),
        ({"d": "2023-02-29"}, "params.d", "is not a valid calendar date"),
        ({"d": "29/02/2024"}, "params.d", "must be an ISO date"),
        ({"t": "2024-01-01T00:00:00"}, "params.t", "has no UTC offset"),
        ({"t": "2024-01-01T\uff10\uff10:00:00Z"}, "params.t", "must be written with ASCII characters"),
        # An offset can carry an instant out of the datetime range in UTC (an OverflowError, a 500, before).
        ({"t": "9999-12-31T23:59:59-23:59"}, "params.t", "is out of range: in UTC it falls outside the years 1-9999"),
        ({"t": "0001-01-01T00:00:00+00:01"}, "params.t", "is out of range: in UTC it falls outside the years 1-9999"),
        ({"f": 10**400}, "params.f", "is out of range for a float"),  # an int a double cannot hold
        ({"f": -(10**400)}, "params.f", "is out of range for a float"),
        ({"il": [1, 2, 3]}, "params.il", "has more than 2 items"),
        ({"il": [1, -1]}, "params.il[1]", "must be >= 0"),
        ({"il": "1,2"}, "params.il", "must be a list"),
        ({"sl": ["ok", "\x00"]}, "params.sl[1]", "NUL"),
        ({"sl": ["toolong"]}, "params.sl[0]", "is longer than 3 characters"),
        ({"extra": 1}, "params.extra", "unknown parameter of statement 'typed'"),
        ({"attempt": 1}, "params.attempt", "is reserved"),
    ],
)
def test_bad_parameters_are_refused_naming_the_parameter(changes, field, message):
    with pytest.raises(sqljobs.InvalidSql) as caught:
        sqljobs.check_params(typed(), {**GOOD, **changes})

    assert caught.value.field == field, caught.value
    assert message in caught.value.message, caught.value


def test_a_missing_parameter_is_required_unless_it_has_a_default():
    stmt = sqljobs.check_entry("report", REPORT, DATABASES)

    with pytest.raises(sqljobs.InvalidSql) as caught:
        sqljobs.check_params(stmt, {"regions": ["eu"]})
    assert (caught.value.field, caught.value.message) == ("params.day", "is required")
    assert sqljobs.check_params(stmt, {"day": "2024-01-01", "regions": ["eu"]})["min_total"] == 0.0


def test_instants_and_numbers_at_their_limits_are_accepted():
    stmt = sqljobs.check_entry(
        "limits",
        {
            "database": "default",
            "sql": "SELECT %(i)s, %(f)s, %(d)s, %(t)s",
            "params": {"i": {"type": "int"}, "f": {"type": "float"}, "d": {"type": "date"}, "t": {"type": "datetime"}},
        },
        DATABASES,
    )
    highest = {"i": 2**63 - 1, "f": 2**1023, "d": "9999-12-31", "t": "9999-12-31T23:59:59.999999+00:00"}
    lowest = {"i": -(2**63), "f": -1.7e308, "d": "0001-01-01", "t": "0001-01-01T00:00:00-23:59"}

    assert sqljobs.check_params(stmt, highest) == {**highest, "f": float(2**1023)}
    assert sqljobs.check_params(stmt, lowest) == {**lowest, "t": "0001-01-01T23:59:00+00:00"}


def test_values_are_bound_as_the_driver_s_types_with_the_fire_s():
    fire = {"fire_key": "k", "scheduled_at": datetime(2024, 1, 1, tzinfo=UTC), "attempt": 2, "tenant": "acme"}
    pg = sqljobs.check_entry("report", REPORT, DATABASES)
    maria = sqljobs.check_entry("report", {**REPORT, "database": "maria"}, DATABASES)
    values = {"day": "2024-01-01", "regions": ["eu", "us"], "min_total": 1.0}

    assert sqljobs.bind_values(pg, values, fire) == {
        "day": date(2024, 1, 1),
        "regions": ["eu", "us"],
        "min_total": 1.0,
        "fire_key": "k",
    }
    assert sqljobs.bind_values(maria, values, fire)["regions"] == ("eu", "us")  # IN %(regions)s


# --- services, API, CLI ----------------------------------------------------------------------------


def test_a_statement_for_some_tenants_is_refused_to_another_tenant_naming_the_field(settings):
    settings.CRONFLEET_SQL = config(report={**REPORT, "tenants": ["acme", "beta"]})
    target = {"name": "report", "params": {"day": "2024-01-01", "regions": ["eu"]}}

    with pytest.raises(services.InvalidInput) as caught:
        sqljobs.check_target(target, "gamma")

    assert (caught.value.field, caught.value.message) == (
        "sql.name",
        "statement 'report' is not allowed for tenant 'gamma' (CRONFLEET_SQL.report.tenants)",
    )
    assert sqljobs.check_target(target, "beta")["name"] == "report"
    assert "(read-only, timeout 5s, tenants acme, beta)" in sqljobs.describe(target)
