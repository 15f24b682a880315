"""Command and http jobs through the services and the CLI: parameters refused at creation, jobs
added from the command line, tenants' signing secrets. Command jobs run end to end through the
worker code (their program a process of its own) are tests/system/targets/test_target_kinds.py."""

import sys

import pytest
from django.core.management import CommandError, call_command

from scheduler_app import services
from scheduler_app.models import Job

SCRIPT = """
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "fire": os.environ.get("CRONFLEET_FIRE_KEY")}))
sys.exit(int(os.environ.get("EXIT", "0")) if sys.argv[-1] != "fail" else 3)
"""


@pytest.fixture
def commands(settings, tmp_path):
    script = tmp_path / "show_argv.py"
    script.write_text(SCRIPT)
    settings.CRONFLEET_COMMANDS = {
        "show": {
            "executable": sys.executable,
            "argv": [str(script), "--day", "{day}", "--", "{words}"],
            "params": {"day": {"type": "date"}, "words": {"type": "str_list", "max_items": 10, "max_length": 100}},
        }
    }
    settings.CRONFLEET_COMMAND_CWD = str(tmp_path)
    return settings.CRONFLEET_COMMANDS


def command_job(tenant, params, **fields):
    return services.job_create(
        tenant,
        services.JobSpec(
            name="cmd", target_kind="command", every=3600, command={"name": "show", "params": params}, **fields
        ),
    )


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"day": "2024-01-01", "words": ["nul\x00"]}, "command.params.words"),
        ({"day": "yesterday", "words": []}, "command.params.day"),
        ({"day": "2024-01-01", "words": [], "extra": "1"}, "command.params.extra"),
    ],
)
def test_bad_command_parameters_are_refused_at_creation(commands, tenant, params, field):
    with pytest.raises(services.InvalidInput) as caught:
        command_job(tenant, params)

    assert caught.value.field.startswith(field)
    assert not Job.objects.exists()


def test_an_unknown_command_is_refused(commands, tenant):
    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(
            tenant, services.JobSpec(name="x", target_kind="command", every=60, command={"name": "rm", "params": {}})
        )
    assert caught.value.field == "command"


def test_jobs_add_creates_http_and_command_jobs(commands, tenant, capsys):
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "hook",
        "--every",
        "60",
        "--http-url",
        "https://example.com/hook",
        "--method",
        "PUT",
        "--header",
        "X-Team: ops",
        "--body",
        '{"a": 1}',
    )
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "cmd",
        "--every",
        "60",
        "--command",
        "show",
        "--param",
        "day=2024-01-01",
        "--param",
        "words=a",
        "--param",
        "words=b",
    )

    hook, cmd = Job.objects.get(name="hook"), Job.objects.get(name="cmd")
    assert (hook.target_kind, hook.target_config) == (
        "http",
        {"method": "PUT", "url": "https://example.com/hook", "headers": {"X-Team": "ops"}, "body": '{"a": 1}'},
    )
    assert (cmd.target_kind, cmd.target_config) == (
        "command",
        {"name": "show", "params": {"day": "2024-01-01", "words": ["a", "b"]}},
    )
    assert "target: http PUT https://example.com/hook" in capsys.readouterr().out


def test_jobs_add_refuses_a_bad_url_naming_the_field(tenant):
    with pytest.raises(CommandError, match="http.url"):
        call_command(
            "jobs",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            "hook",
            "--every",
            "60",
            "--http-url",
            "ftp://example.com/",
        )
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            ["--http-url", "https://example.com/caf\u00e9"],
            "jobs add: http.url: the path and query must be percent-encoded ASCII (they are sent as written); "
            "write https://example.com/caf%C3%A9",
        ),
        (
            ["--http-url", "https://example.com/", "--header", "X A: 1"],
            "jobs add: http.headers.X A: is not a header name",
        ),
        (
            ["--http-url", "https://example.com/", "--header", "X-Price: 5 \u20ac"],
            "jobs add: http.headers.X-Price: must be printable Latin-1",
        ),
    ],
)
def test_jobs_add_refuses_a_header_or_url_no_delivery_could_send(tenant, options, expected):
    with pytest.raises(CommandError) as caught:
        call_command("jobs", "add", "--tenant", tenant.slug, "--name", "hook", "--every", "60", *options)

    assert str(caught.value).startswith(expected), str(caught.value)
    assert not Job.objects.exists()


def test_tenants_rotate_secret_prints_a_secret_that_signs(tenant, capsys):
    from scheduler_app.models import db_now

    call_command("tenants", "rotate-secret", tenant.slug, "--overlap", "0")

    secret = capsys.readouterr().out.splitlines()[1]
    tenant.refresh_from_db()
    assert secret.startswith("whsec_") and secret not in tenant.webhook_secret_encrypted
    assert services.tenant_signing_secrets(tenant, db_now()) == [secret]


def test_a_new_tenant_has_an_encrypted_signing_secret(db):
    from scheduler_app.http import secrets as crypto
    from scheduler_app.models import db_now

    tenant = services.tenant_create(slug="fresh")

    secret = crypto.decrypt(tenant.webhook_secret_encrypted)
    assert secret.startswith("whsec_") and secret not in tenant.webhook_secret_encrypted
    assert services.tenant_signing_secrets(tenant, db_now()) == [secret]
