"""SQL jobs' allow-list and parameters at save (services, API, CLI), refused naming the statement,
the key or the parameter; shown by the API, the CLI and the admin. The checks themselves are
tests/unit/targets/test_sql_jobs.py; running statements is tests/integration/targets/test_sql_running.py."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import Job
from tests.integration.api.test_api import client_for, errors_of, job_body
from tests.unit.targets.test_sql_jobs import GOOD, TYPED, config

# --- services, API, CLI ----------------------------------------------------------------------------


@pytest.fixture
def allow_list(settings):
    settings.CRONFLEET_SQL = config(typed=TYPED)
    return settings.CRONFLEET_SQL


def sql_spec(name="typed", params=None, **fields) -> services.JobSpec:
    return services.JobSpec(
        name="sql",
        target_kind="sql",
        every=3600,
        sql={"name": name, "params": GOOD if params is None else params},
        **fields,
    )


def test_a_sql_job_is_saved_with_its_checked_parameters(allow_list, tenant):
    job = services.job_create(tenant, sql_spec())

    assert (job.target_kind, job.task_name) == ("sql", "")
    assert job.target_config == {"name": "typed", "params": {**GOOD, "t": "2024-01-01T00:00:00+00:00"}}


@pytest.mark.parametrize(
    ("sql", "field"),
    [
        ({"name": "nope", "params": {}}, "sql.name"),
        ({"name": "typed", "params": {**GOOD, "i": 0}}, "sql.params.i"),
        ({"name": "typed", "params": {**GOOD, "s": "'; DROP TABLE x; --"}}, "sql.params.s"),
        ({"name": "typed", "params": [1]}, "sql.params"),
    ],
)
def test_the_services_refuse_a_bad_sql_target_naming_the_field(allow_list, tenant, sql, field):
    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(tenant, services.JobSpec(name="x", target_kind="sql", every=60, sql=sql))

    assert caught.value.field == field
    assert not Job.objects.exists()


def test_an_edit_checks_the_parameters_again(allow_list, tenant):
    job = services.job_create(tenant, sql_spec())

    with pytest.raises(services.InvalidInput) as caught:
        services.job_update(job, {"sql": {"name": "typed", "params": {**GOOD, "c": "asia"}}})
    assert caught.value.field == "sql.params.c"
    job = services.job_update(job, {"sql": {"name": "typed", "params": {**GOOD, "c": "us"}}})
    assert job.target_config["params"]["c"] == "us" and job.version == 2


def test_the_api_refuses_an_instant_out_of_range_naming_the_parameter(allow_list, tenant, settings):
    settings.CRONFLEET_SQL["due"] = {
        "database": "default",
        "sql": "SELECT %(at)s",
        "params": {"at": {"type": "datetime"}},
    }
    target = {"kind": "sql", "name": "due", "params": {"at": "9999-12-31T23:59:59-23:59"}}

    response = client_for(tenant).post("/api/v1/jobs/", job_body(target=target), format="json")

    assert response.status_code == 400
    assert "is out of range" in errors_of(response)["target.params.at"], errors_of(response)
    assert not Job.objects.exists()


def test_the_api_creates_shows_and_edits_a_sql_job(allow_list, tenant):
    api = client_for(tenant)
    target = {"kind": "sql", "name": "typed", "params": GOOD}

    made = api.post("/api/v1/jobs/", job_body(target=target), format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["target"] == {**target, "params": {**GOOD, "t": "2024-01-01T00:00:00+00:00"}}
    changed = api.patch(
        f"/api/v1/jobs/{made.json()['id']}/", {"target": {**target, "params": {**GOOD, "i": 9}}}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["target"]["params"]["i"] == 9


@pytest.mark.parametrize(
    ("target", "field", "message"),
    [
        ({"kind": "sql", "name": "nope"}, "target.name", "'nope' is not a statement in CRONFLEET_SQL"),
        ({"kind": "sql", "name": "typed", "params": {**GOOD, "s": "x\x00"}}, "target.params.s", "NUL"),
        (
            {"kind": "sql", "name": "typed", "params": {**GOOD, "il": [1, "2"]}},
            "target.params.il[1]",
            "must be an integer",
        ),
        (
            {"kind": "sql", "name": "typed", "params": {**GOOD, "fire_key": "mine"}},
            "target.params.fire_key",
            "is reserved",
        ),
        ({"kind": "sql", "name": "typed", "sql": "DROP TABLE x"}, "target.sql", ""),
    ],
)
def test_the_api_refuses_a_bad_sql_target_naming_the_field(allow_list, tenant, target, field, message):
    response = client_for(tenant).post("/api/v1/jobs/", job_body(target=target), format="json")

    assert response.status_code == 400
    errors = errors_of(response)
    assert field in errors and message in errors[field], errors
    assert not Job.objects.exists()


def test_jobs_add_and_edit_a_sql_job(allow_list, tenant, capsys):
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "nightly",
        "--cron",
        "0 2 * * *",
        "--sql",
        "typed",
        "--param",
        "i=3",
        "--param",
        "f=1.5",
        "--param",
        "b=false",
        "--param",
        "s=abc",
        "--param",
        "c=eu",
        "--param",
        "d=2024-02-29",
        "--param",
        "t=2024-01-01T00:00:00Z",
        "--param",
        "il=0",
        "--param",
        "il=7",
        "--param",
        "sl=a",
    )

    job = Job.objects.get(name="nightly")
    assert job.target_config == {
        "name": "typed",
        "params": {
            "i": 3,
            "f": 1.5,
            "b": False,
            "s": "abc",
            "c": "eu",
            "d": "2024-02-29",
            "t": "2024-01-01T00:00:00+00:00",
            "il": [0, 7],
            "sl": ["a"],
        },
    }
    assert "target: sql typed" in capsys.readouterr().out
    call_command(
        "jobs",
        "edit",
        f"{tenant.slug}/nightly",
        "--yes",
        "--param",
        "i=4",
        "--param",
        "f=0",
        "--param",
        "b=yes",
        "--param",
        "s=z",
        "--param",
        "c=us",
        "--param",
        "d=2024-03-01",
        "--param",
        "t=2024-01-01T00:00:00Z",
        "--param",
        "il=1",
        "--param",
        "sl=b",
    )
    job.refresh_from_db()
    assert job.target_config["params"]["i"] == 4 and job.target_config["params"]["b"] is True


CLI_GOOD = ["i=3", "f=1.5", "b=false", "s=abc", "c=eu", "d=2024-02-29", "t=2024-01-01T00:00:00Z", "il=1", "sl=a"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (["i=three"], "jobs add: sql.params.i: 'three' is not a whole number"),
        (["i=11"], "jobs add: sql.params.i: must be <= 10"),
        (["b=maybe"], "jobs add: sql.params.b: 'maybe' is not true or false"),
        (["i=1", "i=2"], "jobs add: sql.params.i: is given twice"),
        (["zz=1"], "jobs add: sql.params.zz: unknown parameter of statement 'typed'"),
    ],
)
def test_jobs_add_refuses_a_bad_sql_parameter_naming_it(allow_list, tenant, params, message):
    given = {param.partition("=")[0] for param in params}
    items = [param for param in CLI_GOOD if param.partition("=")[0] not in given] + params

    with pytest.raises(CommandError) as caught:
        call_command(
            "jobs",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            "x",
            "--every",
            "60",
            "--sql",
            "typed",
            *[item for param in items for item in ("--param", param)],
        )

    assert str(caught.value).startswith(message), str(caught.value)
    assert not Job.objects.exists()


def test_the_admin_shows_a_sql_job_s_statement(allow_list, tenant, admin_client):
    job = services.job_create(tenant, sql_spec(name="report", params={"day": "2024-01-01", "regions": ["eu"]}))

    page = admin_client.get(reverse("admin:scheduler_app_job_change", args=[job.pk])).content.decode()

    assert "SQL statement" in page
    assert "sql report" in page and "on default (read-only, timeout 5s)" in page
    assert "SELECT * FROM orders WHERE day = %(day)s" in page
