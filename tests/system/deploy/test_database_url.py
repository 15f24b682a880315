"""DATABASE_URL and CRONFLEET_SQL_DATABASES for real: a list libpq would misread stops
`manage.py` with one line naming the variable, and a real connection skips a read-only server
in the list as it would a standby. The parsing itself is tested in
tests/unit/deploy/test_database_url.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import connection

from tests.conftest import ROOT, environment_with
from tests.support import servers


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment_with(DJANGO_DEBUG="true", **env),
    )


def test_a_settings_error_names_the_variable_in_one_line():
    done = manage("check", DATABASE_URL="postgres://u@a,b:5442/db")
    assert done.returncode == 2  # manage.py's status for a settings error
    assert done.stderr.strip().splitlines() == [
        "manage.py: DATABASE_URL is not a valid database URL: in the host list 'a,b:5442' only b has a port; "
        "libpq would give a the default port 5432: write every host with its port (or none)"
    ]

    done = manage("check", CRONFLEET_SQL_DATABASES='{"reporting": "host=a,b port=1,2,3 dbname=r"}')
    assert done.returncode == 2  # manage.py's status for a settings error
    assert "CRONFLEET_SQL_DATABASES.reporting: not a valid database URL: 3 ports" in done.stderr
    assert "Traceback" not in done.stderr


SERVER_PORT = (
    "import django; django.setup(); from django.db import connection; "
    "print(connection.cursor().execute('SELECT inet_server_port()').fetchone()[0])"
)


def server_port_with(url: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SERVER_PORT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment_with(DJANGO_DEBUG="true", DATABASE_URL=url),
    )
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
        keyword = (
            f"host={standby.host},{primary.rsplit(':', 1)[0]} port={standby.port},{primary_port} "
            f"dbname={name} user=postgres target_session_attrs=read-write"
        )
        assert server_port_with(keyword) == primary_port
