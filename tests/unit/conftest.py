"""The unit tier: no database, no broker, no process; each test checked, not trusted.

A test collected under tests/unit/ that asks for the database (a django_db mark, or a fixture
that needs one) stops the run before anything runs, naming it; a connection to the suite's
PostgreSQL, Redis, RabbitMQ or MariaDB port fails at once; starting a process fails too. A
loopback server a test makes itself, on a port the kernel picks, still answers.
"""

from __future__ import annotations

import socket
import subprocess
from urllib.parse import urlsplit

import pytest

NEEDS_A_SERVICE = {
    "db",
    "transactional_db",
    "live_server",
    "admin_user",
    "admin_client",
    "tenant",
    "make_job",
    "make_run",
    "processes",
    "rabbitmq_queue",
}


@pytest.fixture(scope="session", autouse=True)
def no_database_session_left_behind():
    """tests/conftest.py's, without django_db_setup: a unit run makes no test database."""
    yield


def pytest_collection_modifyitems(config, items):
    wrong = [
        f"{item.nodeid}: {', '.join(sorted(NEEDS_A_SERVICE & set(item.fixturenames))) or 'django_db mark'}"
        for item in items
        if f"{'tests'}/unit/" in item.nodeid
        and (item.get_closest_marker("django_db") or NEEDS_A_SERVICE & set(item.fixturenames))
    ]
    if wrong:
        raise pytest.UsageError(
            "tests/unit/ is for tests that need no database, server or process; move these "
            "to tests/integration/ or tests/system/:\n" + "\n".join(wrong)
        )


def service_ports() -> set[int]:
    from django.conf import settings  # here: read once Django is set up, as pytest-django does

    ports = {
        int(db.get("PORT") or {"postgresql": 5432, "mysql": 3306}.get(db["ENGINE"].rsplit(".", 1)[-1], 0))
        for db in settings.DATABASES.values()
    }
    return ports | {urlsplit(settings.CELERY_BROKER_URL).port or 6379, 5672}


@pytest.fixture(autouse=True)
def no_services_and_no_processes(monkeypatch):
    ports = service_ports()
    connect = socket.socket.connect

    def refuse_services(self, address):
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in ports:
            raise ConnectionRefusedError(
                f"a unit test reached for a service (port {address[1]}): it belongs in tests/integration/"
            )
        return connect(self, address)

    def refuse_processes(*args, **kwargs):
        raise AssertionError("a unit test started a process: it belongs in tests/system/")

    monkeypatch.setattr(socket.socket, "connect", refuse_services)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_processes)
