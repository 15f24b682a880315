"""Schedules as code within its bounds (issue 40): an owner is scoped to the tenants its file
declares, so two teams both called `ops` never prune each other; a tenant's quotas fail the
plan, before any apply work; a file or a job over the API's bounds is one clean error. The
command runs in this process against the real PostgreSQL. The rest of schedules as code:
test_schedules_as_code.py."""

from __future__ import annotations

import textwrap
from unittest import mock

import pytest

from scheduler_app import services
from scheduler_app.models import Job, Tenant, db_now
from tests.integration.services.test_schedules_as_code import run as schedules

OPS = """
owner = "ops"
tenant = "{tenant}"
{jobs}
"""


def jobs_toml(*names: str, every: int = 600) -> str:
    return "".join(f'\n[[jobs]]\nname = "{name}"\nevery = {every}\ntask = "scheduler_app.echo"\n' for name in names)


@pytest.fixture
def alpha(db) -> Tenant:
    return services.tenant_create(slug="alpha", name="Alpha")


@pytest.fixture
def beta(db) -> Tenant:
    return services.tenant_create(slug="beta", name="Beta")


@pytest.fixture
def declare(tmp_path):
    """declare(name, text): write a declaration file; returns its path."""

    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return write


def fingerprint_of(out: str) -> str:
    return out.split("Fingerprint: ")[1].split()[0]


def state(tenant: Tenant) -> dict[str, tuple]:
    return {
        job.name: (job.version, job.enabled, job.managed_by)
        for job in Job.objects.filter(tenant=tenant).order_by("name")
    }


# --- owners scoped to their tenants --------------------------------------------------------


def test_pruning_betas_ops_leaves_alphas_ops_jobs_alone_and_warns(alpha, beta, declare):
    # The probe: two teams call themselves ops, one in alpha, one in beta.
    assert (
        schedules("apply", "--file", declare("alpha-ops.toml", OPS.format(tenant="alpha", jobs=jobs_toml("a1", "a2"))))[
            0
        ]
        == 0
    )
    before = state(alpha)
    path = declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("b1")))

    code, plan = schedules("plan", "--file", path, "--prune", "delete")
    code_apply, applied = schedules("apply", "--file", path, "--prune", "delete")

    assert code == 2, plan
    assert "Plan: 1 to create, 0 to change, 0 to remove (deleted), 0 unchanged." in plan
    assert "Warning: owner 'ops' also owns 2 jobs in tenant(s) alpha, not touched." in plan
    assert "alpha/" not in plan
    assert code_apply == 0, applied
    assert "1 created, 0 changed, 0 deleted" in applied
    assert "Warning: owner 'ops' also owns 2 jobs in tenant(s) alpha, not touched." in applied
    assert state(alpha) == before == {"a1": (1, True, "ops"), "a2": (1, True, "ops")}
    assert state(beta) == {"b1": (1, True, "ops")}


def test_a_group_with_no_jobs_prunes_its_owner_in_its_own_tenant_only(alpha, beta, declare):
    schedules("apply", "--file", declare("alpha-ops.toml", OPS.format(tenant="alpha", jobs=jobs_toml("a1", "a2"))))
    schedules("apply", "--file", declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("b1"))))
    before = state(alpha)
    empty = declare("beta-empty.toml", OPS.format(tenant="beta", jobs=""))

    code, plan = schedules("plan", "--file", empty, "--prune", "delete")
    assert code == 2 and "- remove (delete) beta/b1" in plan and "1 to remove (deleted)" in plan, plan
    assert "also owns 2 jobs in tenant(s) alpha, not touched" in plan
    code, applied = schedules("apply", "--file", empty, "--prune", "delete")

    assert code == 0 and "1 deleted" in applied, applied
    assert state(beta) == {}
    assert state(alpha) == before


def test_owner_alone_touches_no_tenant_the_declarations_do_not_name(alpha, beta, declare):
    schedules("apply", "--file", declare("alpha-ops.toml", OPS.format(tenant="alpha", jobs=jobs_toml("a1", "a2"))))
    schedules("apply", "--file", declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("b1"))))
    nothing = declare("none.toml", "")

    code, applied = schedules("apply", "--file", nothing, "--owner", "ops", "--prune", "delete")

    assert code == 0, applied
    assert "Warning: owner 'ops' also owns 3 jobs in tenant(s) alpha, beta, not touched." in applied
    assert Job.objects.filter(managed_by="ops").count() == 3


def test_a_plans_fingerprint_applies_and_ignores_the_owners_jobs_in_other_tenants(alpha, beta, declare):
    schedules("apply", "--file", declare("alpha-ops.toml", OPS.format(tenant="alpha", jobs=jobs_toml("a1", "a2"))))
    path = declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("b1")))
    code, plan = schedules("plan", "--file", path, "--prune", "delete")
    # An edit of alpha's ops job is no business of beta's plan: its fingerprint holds.
    services.job_update(Job.objects.get(tenant=alpha, name="a1"), {"priority": 9}, actor="cli")

    code, applied = schedules("apply", "--file", path, "--prune", "delete", "--fingerprint", fingerprint_of(plan))

    assert code == 0 and f"Applied plan {fingerprint_of(plan)}: 1 created" in applied, applied
    # An edit of beta's ops job meanwhile does stale it.
    code, plan = schedules("plan", "--file", path)
    Job.objects.filter(tenant=beta, name="b1").update(priority=1, version=2)
    assert schedules("apply", "--file", path, "--fingerprint", fingerprint_of(plan))[0] == 1


def test_a_group_naming_a_tenant_that_does_not_exist_is_an_error(alpha, declare):
    code, out = schedules("plan", "--file", declare("nope.toml", OPS.format(tenant="nope", jobs="")))

    assert code == 1 and "nope.toml: group of owner 'ops': tenant: no tenant 'nope'" in out, out


# --- quotas in the plan --------------------------------------------------------------------


def test_a_plan_over_the_tenants_max_jobs_fails_naming_the_tenant_and_writes_nothing(beta, declare):
    Tenant.objects.filter(id=beta.id).update(max_jobs=3)
    Job.objects.create(
        tenant=beta, name="by-hand", task_name="scheduler_app.echo", every_seconds=600, next_run_at=db_now()
    )
    path = declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml(*(f"j{n}" for n in range(5)))))

    # Refused before a single job is planned, let alone applied.
    with mock.patch("scheduler_app.services.declared.plan_declared", side_effect=AssertionError("planned")):
        code, plan = schedules("plan", "--file", path)
        code_apply, applied = schedules("apply", "--file", path)

    expected = (
        f"{path}: tenant beta: max_jobs: applying would leave 6 jobs (1 now, 5 to create, 0 to delete), "
        "more than its quota of 3 jobs (max_jobs)"
    )
    assert code == 1 and expected in plan, plan
    assert code_apply == 1 and expected in applied and "nothing applied" in applied, applied
    assert list(Job.objects.values_list("name", flat=True)) == ["by-hand"]


def test_a_plan_that_deletes_as_many_as_it_creates_fits_a_full_quota(beta, declare):
    Tenant.objects.filter(id=beta.id).update(max_jobs=2)
    schedules("apply", "--file", declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("old1", "old2"))))
    path = declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("new1", "new2")))

    assert schedules("plan", "--file", path)[0] == 1  # pausing keeps the old ones: over the quota
    code, plan = schedules("plan", "--file", path, "--prune", "delete")
    code_apply, applied = schedules("apply", "--file", path, "--prune", "delete")

    assert code == 2 and "2 to create, 0 to change, 2 to remove (deleted)" in plan, plan
    assert code_apply == 0 and "2 created, 0 changed, 2 deleted" in applied, applied
    assert sorted(state(beta)) == ["new1", "new2"]


def test_a_schedule_faster_than_the_tenants_min_interval_fails_the_plan(beta, declare):
    Tenant.objects.filter(id=beta.id).update(min_interval_seconds=300)
    path = declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("fast", every=60)))

    code, plan = schedules("plan", "--file", path)

    assert code == 1, plan
    assert "job beta/fast: every: fires every 60 s; tenant 'beta' allows at least 300 s" in plan
    assert "(min_interval_seconds)" in plan and not Job.objects.exists()


# --- the API's bounds on a file ------------------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_unread(beta, declare, settings):
    settings.CRONFLEET_SCHEDULES_MAX_FILE_BYTES = 4096
    path = declare(
        "beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("big")) + f'description = "{"x" * 5000}"\n'
    )

    code, out = schedules("apply", "--file", path)

    assert code == 1 and "bytes, more than CRONFLEET_SCHEDULES_MAX_FILE_BYTES (4096); not read" in out, out
    assert not Job.objects.exists()


def test_kwargs_over_the_apis_body_limit_are_refused_naming_the_job_and_the_field(beta, declare):
    blob = "x" * (256 * 1024)  # the API refuses a body this large (CRONFLEET_API_MAX_BODY_BYTES)
    path = declare(
        "beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("big")) + f'kwargs = {{blob = "{blob}"}}\n'
    )

    code, out = schedules("apply", "--file", path)

    assert code == 1, out
    assert f"{path}: job 'big': kwargs: is 262155 bytes as JSON, more than CRONFLEET_API_MAX_BODY_BYTES (262144)" in out
    assert not Job.objects.exists()


def test_kwargs_nested_five_thousand_deep_are_one_clean_error(beta, declare):
    deep = "{a = " * 5000 + "1" + "}" * 5000
    path = declare("beta-ops.toml", OPS.format(tenant="beta", jobs=jobs_toml("deep")) + f"kwargs = {deep}\n")

    code, out = schedules("plan", "--file", path)

    assert code == 1, out[:2000]
    assert out == (
        f"schedules: bad declarations, nothing planned:\n  {path}: job 'deep': kwargs: "
        "must not nest deeper than 32 levels (line 10)"
    )
    assert "Traceback" not in out and "RecursionError" not in out
