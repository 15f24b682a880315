"""The documented production way of serving, run for real: the Dockerfile's command (gunicorn
with the production settings against PostgreSQL) and the beat's liveness file. The compose
files and the Dockerfile are checked as files in tests/unit/deploy/test_deploy.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection

from scheduler_app import services
from scheduler_app.models import Tenant
from tests.conftest import ROOT, process_env, wait_for
from tests.support.web import get, get_or_none
from tests.unit.deploy.test_deploy import dockerfile_cmd

# --- runbeat --alive-file ---------------------------------------------------------------------


def test_runbeat_touches_its_alive_file_after_a_turn(db, tmp_path):
    alive = tmp_path / "runbeat.alive"

    done = subprocess.run(
        [sys.executable, "manage.py", "runbeat", "--once", "--alive-file", str(alive)],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert alive.exists()


# --- the Dockerfile's command, for real ----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def production_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    """The environment of the image: no debug, the web server's own settings."""
    env = process_env(
        CRONFLEET_VAR_DIR=str(tmp_path),
        CRONFLEET_WEB_BIND=f"127.0.0.1:{port}",
        CRONFLEET_WEB_WORKERS="1",
        CRONFLEET_WEB_THREADS="2",
        **extra,
    )
    env.pop("DJANGO_DEBUG", None)
    return env


def test_the_image_command_refuses_to_start_without_a_secret_key(tmp_path):
    env = production_env(tmp_path, free_port(), DJANGO_SECRET_KEY="")

    done = subprocess.run(
        [sys.executable, "-m", *dockerfile_cmd()], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in done.stdout + done.stderr


@pytest.mark.django_db(transaction=True)
def test_the_image_command_serves_the_api_and_static_files_within_its_connection_budget(tmp_path, processes):
    tenant = Tenant.objects.create(slug="served", name="Served")
    _, raw = services.apikey_create(tenant=tenant, name="served")
    port = free_port()
    env = production_env(tmp_path, port)
    collect = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collect.returncode == 0, collect.stderr
    server = processes.start("gunicorn", [sys.executable, "-m", *dockerfile_cmd()], **env)
    wait_for(
        lambda: server.poll() is not None or get_or_none(port, "/healthz") == 200, timeout=60, what="gunicorn to answer"
    )
    assert server.poll() is None, processes.log("gunicorn")

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = list(pool.map(lambda _: get(port, "/api/v1/me", {"Authorization": f"Bearer {raw}"})[0], range(60)))
    peak = database_connections()
    not_found = get(port, "/api/v1/jobs/1.0/", {"Authorization": f"Bearer {raw}"})
    css = get(port, "/static/admin/css/base.css")
    docs = get(port, "/api/docs/")

    assert statuses == [200] * 60
    assert peak <= 2  # one worker x two threads: one pooled connection per thread at most
    assert not_found[0] == 404 and json.loads(not_found[2])["errors"][0]["field"] == "path"
    assert css[0] == 200 and css[1]["Content-Type"].startswith("text/css")
    assert docs[0] == 200 and b"swagger-ui" in docs[2]


def database_connections() -> int:
    """Connections to this test's database other than the test's own (the server's)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]
