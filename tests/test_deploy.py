"""The documented production way of serving: docker-compose.yml (checked against the
compose-spec schema, as no Docker engine runs here), the Dockerfile's command run for real
(gunicorn with the production settings against PostgreSQL), the first admin user from the
environment, and the beat's liveness file."""

from __future__ import annotations

import http.client
import importlib.resources
import json
import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection

from scheduler_app import services
from scheduler_app.models import Tenant
from tests.conftest import ROOT, process_env, wait_for

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = {name for name, service in SERVICES.items() if service.get("build")}
REQUIRED = re.compile(r"^\$\{(?P<name>[A-Z_]+):\?[^}]+\}$")  # ${NAME:?message}: set, or compose stops


def dockerfile_cmd() -> list[str]:
    [line] = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD ")]
    return json.loads(line.removeprefix("CMD "))


# --- docker-compose.yml --------------------------------------------------------------------


def test_the_compose_file_is_valid_against_the_compose_spec_schema():
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())

    errors = [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
              for error in jsonschema.Draft202012Validator(schema).iter_errors(COMPOSE)]

    assert errors == []


def test_every_app_service_waits_for_migrate_to_complete():
    assert APP_SERVICES >= {"migrate", "bootstrap-admin", "web", "beat", "worker", "flower"}
    for name in APP_SERVICES - {"migrate"}:
        assert SERVICES[name]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}, name
    assert {need["condition"] for need in SERVICES["migrate"]["depends_on"].values()} == {"service_healthy"}


def test_env_file_values_are_never_shadowed_and_the_secrets_are_required():
    for name in APP_SERVICES:
        service = SERVICES[name]
        assert service["env_file"] == [{"path": ".env", "required": True}], name
        for variable, value in service.get("environment", {}).items():
            # Only ${VARIABLE:?...}, which is .env's own value: a literal would override .env.
            match = REQUIRED.match(str(value))
            assert match and match["name"] == variable, f"{name}: {variable}={value!r} shadows .env"
        assert "DJANGO_SECRET_KEY" in service["environment"], name
    assert REQUIRED.match(SERVICES["db"]["environment"]["POSTGRES_PASSWORD"])
    assert REQUIRED.match(SERVICES["flower"]["environment"]["FLOWER_BASIC_AUTH"])


def test_the_web_runs_gunicorn_and_nothing_runs_the_development_server():
    assert SERVICES["web"]["command"] == dockerfile_cmd() == ["gunicorn", "-c", "project/gunicorn.conf.py"]
    for name in APP_SERVICES:
        assert "runserver" not in json.dumps(SERVICES[name].get("command", [])), name
    assert "runserver" not in (ROOT / "Dockerfile").read_text()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()


def test_web_beat_and_worker_have_health_checks_that_prove_the_process_works():
    web = " ".join(SERVICES["web"]["healthcheck"]["test"])
    beat = " ".join(SERVICES["beat"]["healthcheck"]["test"])
    worker = " ".join(SERVICES["worker"]["healthcheck"]["test"])

    assert "http://localhost:8000/healthz" in web
    assert "--alive-file" in SERVICES["beat"]["command"]
    alive_file = SERVICES["beat"]["command"][SERVICES["beat"]["command"].index("--alive-file") + 1]
    assert f"find {alive_file} -mmin -1" in beat
    assert "inspect ping -d worker@$$HOSTNAME" in worker and "worker@%h" in SERVICES["worker"]["command"]


def test_a_stopped_worker_gets_longer_than_its_longest_run_in_compose_and_systemd():
    from django.conf import settings

    from scheduler_app.worker.flight import SHUTDOWN_SECONDS

    longest = settings.CRONFLEET_MAX_JOB_TIMEOUT_SECONDS + 30 + SHUTDOWN_SECONDS  # + the hard time limit's 30 s
    grace = SERVICES["worker"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) >= longest, grace
    unit = (ROOT / "deploy" / "systemd" / "cronfleet-worker.service").read_text()
    [timeout] = re.findall(r"^TimeoutStopSec=(\d+)$", unit, re.MULTILINE)
    assert int(timeout) >= longest and "KillMode=mixed" in unit


def test_the_first_admin_is_bootstrapped_once_from_the_environment():
    bootstrap = SERVICES["bootstrap-admin"]

    assert bootstrap["command"] == ["python", "manage.py", "bootstrap_admin"]
    assert bootstrap["restart"] == "no"


TLS_COMPOSE = yaml.safe_load((ROOT / "deploy" / "docker-compose.tls.yml").read_text())


def test_the_tls_file_is_valid_against_the_compose_spec_schema():
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())

    assert list(jsonschema.Draft202012Validator(schema).iter_errors(TLS_COMPOSE)) == []


def test_the_plain_http_web_port_is_published_on_loopback_by_default():
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            published = str(port)
            # "${CRONFLEET_WEB_PUBLISH:-127.0.0.1:8000}:8000" and "127.0.0.1:5555:5555" alike
            default = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", published)
            assert default.startswith("127.0.0.1:"), f"{name} publishes {published} beyond loopback"
    assert SERVICES["web"]["ports"] == ["${CRONFLEET_WEB_PUBLISH:-127.0.0.1:8000}:8000"]


def test_the_public_host_name_comes_from_one_required_variable():
    for name in APP_SERVICES:
        assert REQUIRED.match(SERVICES[name]["environment"]["CRONFLEET_HOST"]), name
    assert REQUIRED.match(TLS_COMPOSE["services"]["caddy"]["environment"]["CRONFLEET_HOST"])
    assert "{$CRONFLEET_HOST}" in (ROOT / "deploy" / "caddy" / "Caddyfile").read_text()


def test_the_first_admins_username_and_password_are_required():
    environment = SERVICES["bootstrap-admin"]["environment"]
    for variable in ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD"):
        match = REQUIRED.match(environment[variable])
        assert match and match["name"] == variable


def test_the_tls_proxy_is_an_opt_in_file_in_front_of_the_web():
    caddy = TLS_COMPOSE["services"]["caddy"]

    assert set(TLS_COMPOSE["services"]) == {"caddy"}
    assert caddy["depends_on"] == {"web": {"condition": "service_healthy"}}
    assert caddy["image"].startswith("caddy:")
    assert "./deploy/caddy/Caddyfile:/etc/caddy/Caddyfile:ro" in caddy["volumes"]
    assert "reverse_proxy web:8000" in (ROOT / "deploy" / "caddy" / "Caddyfile").read_text()
    assert set(caddy["ports"]) >= {"80:80", "443:443"}


# --- manage.py bootstrap_admin ----------------------------------------------------------------


def test_bootstrap_admin_makes_the_first_superuser_from_the_environment_and_then_nothing(db, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "root")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a long passphrase 7")

    call_command("bootstrap_admin")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "another long passphrase 8")
    call_command("bootstrap_admin")

    [admin] = User.objects.all()
    assert admin.is_superuser and admin.is_staff and admin.check_password("a long passphrase 7")


@pytest.mark.parametrize(("env", "message"), [
    ({"DJANGO_SUPERUSER_USERNAME": "root"}, "DJANGO_SUPERUSER_PASSWORD is not set"),
    ({"DJANGO_SUPERUSER_PASSWORD": "a long passphrase 7"}, "DJANGO_SUPERUSER_USERNAME is not set"),
    ({"DJANGO_SUPERUSER_USERNAME": "root", "DJANGO_SUPERUSER_PASSWORD": "short"}, "This password is too short"),
])
def test_bootstrap_admin_refuses_an_incomplete_environment(db, monkeypatch, env, message):
    for name in ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(CommandError, match=message):
        call_command("bootstrap_admin")

    assert not User.objects.exists()


# --- runbeat --alive-file ---------------------------------------------------------------------


def test_runbeat_touches_its_alive_file_after_a_turn(db, tmp_path):
    alive = tmp_path / "runbeat.alive"

    done = subprocess.run([sys.executable, "manage.py", "runbeat", "--once", "--alive-file", str(alive)], cwd=ROOT,
                          env=process_env(), capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert alive.exists()


# --- the Dockerfile's command, for real ----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def production_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    """The environment of the image: no debug, the web server's own settings."""
    env = process_env(CRONFLEET_VAR_DIR=str(tmp_path), CRONFLEET_WEB_BIND=f"127.0.0.1:{port}",
                      CRONFLEET_WEB_WORKERS="1", CRONFLEET_WEB_THREADS="2", **extra)
    env.pop("DJANGO_DEBUG", None)
    return env


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": "localhost", **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_the_image_command_refuses_to_start_without_a_secret_key(tmp_path):
    env = production_env(tmp_path, free_port(), DJANGO_SECRET_KEY="")

    done = subprocess.run([sys.executable, "-m", *dockerfile_cmd()], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)

    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in done.stdout + done.stderr


@pytest.mark.django_db(transaction=True)
def test_the_image_command_serves_the_api_and_static_files_within_its_connection_budget(tmp_path, processes):
    tenant = Tenant.objects.create(slug="served", name="Served")
    _, raw = services.apikey_create(tenant=tenant, name="served")
    port = free_port()
    env = production_env(tmp_path, port)
    collect = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120)
    assert collect.returncode == 0, collect.stderr
    server = processes.start("gunicorn", [sys.executable, "-m", *dockerfile_cmd()], **env)
    wait_for(lambda: server.poll() is not None or get_or_none(port, "/healthz") == 200, timeout=60,
             what="gunicorn to answer")
    assert server.poll() is None, processes.log("gunicorn")

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = list(pool.map(lambda _: get(port, "/api/v1/me", {"Authorization": f"Bearer {raw}"})[0],
                                 range(60)))
    peak = database_connections()
    not_found = get(port, "/api/v1/jobs/1.0/", {"Authorization": f"Bearer {raw}"})
    css = get(port, "/static/admin/css/base.css")
    docs = get(port, "/api/docs/")

    assert statuses == [200] * 60
    assert peak <= 2  # one worker x two threads: one pooled connection per thread at most
    assert not_found[0] == 404 and json.loads(not_found[2])["errors"][0]["field"] == "path"
    assert css[0] == 200 and css[1]["Content-Type"].startswith("text/css")
    assert docs[0] == 200 and b"swagger-ui" in docs[2]


def get_or_none(port: int, path: str) -> int | None:
    try:
        return get(port, path)[0]
    except OSError:
        return None


def database_connections() -> int:
    """Connections to this test's database other than the test's own (the server's)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]
