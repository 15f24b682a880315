"""DATABASE_URL and CRONFLEET_SQL_DATABASES in every form libpq documents for several hosts
(project/database_url.py), ambiguous lists refused by name, and a real connection that skips
a read-only server in the list as it would a standby."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import connection

from project.database_url import DatabaseURLError, parse
from tests.conftest import ROOT, environment_with
from tests.support import servers


def fields(config: dict) -> tuple:
    return config["ENGINE"], config["HOST"], str(config["PORT"]), config["NAME"], config["USER"], config["OPTIONS"]


PG = "django.db.backends.postgresql"


@pytest.mark.parametrize(("url", "expected"), [
    # libpq's URI form, each host with its port
    ("postgres://u:p@a:5440,b:5442/db?target_session_attrs=read-write",
     (PG, "a,b", "5440,5442", "db", "u", {"target_session_attrs": "read-write"})),
    ("postgresql://u@a,b/db", (PG, "a,b", "", "db", "u", {})),
    ("postgres://u@[::1]:5432,[::2]:5433/db", (PG, "::1,::2", "5432,5433", "db", "u", {})),
    # the keyword form: one port for all hosts, or one per host
    ("host=a,b port=5440,5442 dbname=db user=u target_session_attrs=read-write",
     (PG, "a,b", "5440,5442", "db", "u", {"target_session_attrs": "read-write"})),
    ("host=a,b port=5432 dbname=db", (PG, "a,b", "5432", "db", "", {})),
    # the query form the first black-box failover run used
    ("postgres://u@/db?host=a,b&port=5440,5442&target_session_attrs=read-write",
     (PG, "a,b", "5440,5442", "db", "u", {"target_session_attrs": "read-write"})),
    # one host, as before
    ("postgres://u@127.0.0.1:5432/db", (PG, "127.0.0.1", "5432", "db", "u", {})),
    ("mysql://root@127.0.0.1:3306/test", ("django.db.backends.mysql", "127.0.0.1", "3306", "test", "root", {})),
])
def test_every_documented_form_is_read(url, expected):
    assert fields(parse(url, conn_max_age=60)) == expected


@pytest.mark.parametrize(("url", "message"), [
    ("postgres://u@a,b:5442/db", "only b has a port; libpq would give a the default port 5432"),
    ("postgres://u@a:99999,b:1/db", "the port of host 'a' is not a port number: '99999'"),
    ("postgres://u@a:1,,b:2/db", "an empty host in the host list"),
    ("host=a,b port=1,2,3 dbname=db", "3 ports (1,2,3) for 2 hosts (a,b)"),
    ("host=a port=x dbname=db", "not a port number in 'x'"),
    ("postgres://u@a:1,b:2/db?host=c", "hosts are given twice"),
    ("postgres://u@a/db?host=c", "hosts are given twice"),
    ("host='unterminated dbname=db", "not a libpq connection string"),
])
def test_an_ambiguous_or_broken_list_is_refused_naming_the_problem(url, message):
    with pytest.raises(DatabaseURLError) as raised:
        parse(url, conn_max_age=60)
    assert message in str(raised.value)


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=environment_with(DJANGO_DEBUG="true", **env))


def test_a_settings_error_names_the_variable_in_one_line():
    done = manage("check", DATABASE_URL="postgres://u@a,b:5442/db")
    assert done.returncode == 2  # manage.py's status for a settings error
    assert done.stderr.strip().splitlines() == [
        "manage.py: DATABASE_URL is not a valid database URL: in the host list 'a,b:5442' only b has a port; "
        "libpq would give a the default port 5432: write every host with its port (or none)"]

    done = manage("check", CRONFLEET_SQL_DATABASES='{"reporting": "host=a,b port=1,2,3 dbname=r"}')
    assert done.returncode == 2  # manage.py's status for a settings error
    assert "CRONFLEET_SQL_DATABASES.reporting: not a valid database URL: 3 ports" in done.stderr
    assert "Traceback" not in done.stderr


SERVER_PORT = ("import django; django.setup(); from django.db import connection; "
               "print(connection.cursor().execute('SELECT inet_server_port()').fetchone()[0])")


def server_port_with(url: str) -> int:
    done = subprocess.run([sys.executable, "-c", SERVER_PORT], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=environment_with(DJANGO_DEBUG="true", DATABASE_URL=url))
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.django_db
def test_read_write_skips_a_read_only_server_listed_first_as_it_would_a_standby():
    """The first host is a server of the test's own whose database refuses writes (as a hot
    standby's does); the second is the test database's own server. With
    target_session_attrs=read-write the connection goes to the second, in each form; with
    `any` to the first: the list is read and tried in order."""
    name = connection.settings_dict["NAME"]
    primary = f"{connection.settings_dict['HOST'] or '127.0.0.1'}:{connection.settings_dict['PORT'] or 5432}"
    primary_port = int(primary.rsplit(":", 1)[1])
    with servers.private_postgres() as standby:
        standby.create_database(name)
        standby.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        first = f"{standby.host}:{standby.port}"

        uri = f"postgres://postgres@{first},{primary}/{name}"
        assert server_port_with(f"{uri}?target_session_attrs=read-write") == primary_port
        assert server_port_with(f"{uri}?target_session_attrs=any") == standby.port
        keyword = (f"host={standby.host},{primary.rsplit(':', 1)[0]} port={standby.port},{primary_port} "
                   f"dbname={name} user=postgres target_session_attrs=read-write")
        assert server_port_with(keyword) == primary_port
