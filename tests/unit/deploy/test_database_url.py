"""DATABASE_URL and CRONFLEET_SQL_DATABASES in every form libpq documents for several hosts
(project/database_url.py), and ambiguous lists refused by name. Settings errors at start-up
and a real connection that skips a read-only server are tested in
tests/system/deploy/test_database_url.py."""

from __future__ import annotations

import pytest

from project.database_url import DatabaseURLError, parse


def fields(config: dict) -> tuple:
    return config["ENGINE"], config["HOST"], str(config["PORT"]), config["NAME"], config["USER"], config["OPTIONS"]


PG = "django.db.backends.postgresql"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # libpq's URI form, each host with its port
        (
            "postgres://u:p@a:5440,b:5442/db?target_session_attrs=read-write",
            (PG, "a,b", "5440,5442", "db", "u", {"target_session_attrs": "read-write"}),
        ),
        ("postgresql://u@a,b/db", (PG, "a,b", "", "db", "u", {})),
        ("postgres://u@[::1]:5432,[::2]:5433/db", (PG, "::1,::2", "5432,5433", "db", "u", {})),
        # the keyword form: one port for all hosts, or one per host
        (
            "host=a,b port=5440,5442 dbname=db user=u target_session_attrs=read-write",
            (PG, "a,b", "5440,5442", "db", "u", {"target_session_attrs": "read-write"}),
        ),
        ("host=a,b port=5432 dbname=db", (PG, "a,b", "5432", "db", "", {})),
        # the query form the first black-box failover run used
        (
            "postgres://u@/db?host=a,b&port=5440,5442&target_session_attrs=read-write",
            (PG, "a,b", "5440,5442", "db", "u", {"target_session_attrs": "read-write"}),
        ),
        # one host, as before
        ("postgres://u@127.0.0.1:5432/db", (PG, "127.0.0.1", "5432", "db", "u", {})),
        ("mysql://root@127.0.0.1:3306/test", ("django.db.backends.mysql", "127.0.0.1", "3306", "test", "root", {})),
    ],
)
def test_every_documented_form_is_read(url, expected):
    assert fields(parse(url, conn_max_age=60)) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgres://u@a,b:5442/db", "only b has a port; libpq would give a the default port 5432"),
        ("postgres://u@a:99999,b:1/db", "the port of host 'a' is not a port number: '99999'"),
        ("postgres://u@a:1,,b:2/db", "an empty host in the host list"),
        ("host=a,b port=1,2,3 dbname=db", "3 ports (1,2,3) for 2 hosts (a,b)"),
        ("host=a port=x dbname=db", "not a port number in 'x'"),
        ("postgres://u@a:1,b:2/db?host=c", "hosts are given twice"),
        ("postgres://u@a/db?host=c", "hosts are given twice"),
        ("host='unterminated dbname=db", "not a libpq connection string"),
    ],
)
def test_an_ambiguous_or_broken_list_is_refused_naming_the_problem(url, message):
    with pytest.raises(DatabaseURLError) as raised:
        parse(url, conn_max_age=60)
    assert message in str(raised.value)
