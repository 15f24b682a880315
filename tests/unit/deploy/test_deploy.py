"""The documented production way of serving, as files: docker-compose.yml and the TLS file
checked against the compose-spec schema (no Docker engine runs here), the Dockerfile's
command, health checks, stop grace periods and the first admin's variables. The first admin
made from the environment is tested in tests/integration/deploy/test_deploy.py; the
Dockerfile's command run for real and the beat's liveness file in
tests/system/deploy/test_deploy.py."""

from __future__ import annotations

import importlib.resources
import json
import re

import jsonschema
import yaml

from tests.conftest import ROOT

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

    errors = [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in jsonschema.Draft202012Validator(schema).iter_errors(COMPOSE)
    ]

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
