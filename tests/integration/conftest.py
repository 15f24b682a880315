"""The integration tier: the real PostgreSQL, Redis, RabbitMQ and MariaDB from this one pytest
process, and no process of its own: a test that starts one fails here, naming where it belongs."""

import subprocess

import pytest


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    def refuse_processes(*args, **kwargs):
        raise AssertionError("an integration test started a process: it belongs in tests/system/")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_processes)
