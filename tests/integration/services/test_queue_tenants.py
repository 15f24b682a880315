"""Another tenant's dedicated queue is refused (issue 40 item 6): with CRONFLEET_QUEUES unset a
job may name any queue, so a named queue is the tenant's whose jobs use it; another tenant's
job there is refused naming the field `queue`, through every path that writes a job (the
services, the API, the CLI, the admin, schedules files, tenants import, import_beat), and two
tenants claiming a fresh queue at once cannot both win. The default queue, the batch queues
and every queue CRONFLEET_QUEUES lists stay shared."""

from __future__ import annotations

import io
import json
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction
from django.urls import reverse
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from scheduler_app import services
from scheduler_app.models import Job, Tenant, db_now
from scheduler_app.services import importbeat, tenantmove
from scheduler_app.services.common import lock_names
from tests.conftest import wait_for
from tests.integration.services.test_schedules_as_code import run as schedules
from tests.integration.services.test_tenant_bounds import client_for
from tests.support.admin import job_form

TASK = "scheduler_app.echo"
REFUSED = "queue 'billing' is used by another tenant's jobs; "


@pytest.fixture
def alpha(db) -> Tenant:
    return services.tenant_create(slug="alpha", name="Alpha")


@pytest.fixture
def beta(db) -> Tenant:
    return services.tenant_create(slug="beta", name="Beta")


def add(tenant: Tenant, name: str, queue: str) -> Job:
    return services.job_create(tenant, services.JobSpec(name=name, cron="0 * * * *", task_name=TASK, queue=queue))


def test_a_queue_another_tenants_jobs_use_is_refused_naming_the_field(alpha, beta):
    add(alpha, "invoices", "billing")

    with pytest.raises(services.InvalidInput) as refused:
        add(beta, "steal", "billing")

    assert refused.value.field == "queue"
    assert refused.value.message.startswith(REFUSED) and "alpha" not in refused.value.message
    assert not Job.objects.filter(tenant=beta).exists()
    add(alpha, "receipts", "billing")  # the tenant's own queue stays open to it


def test_an_edit_onto_another_tenants_queue_is_refused_and_a_kept_queue_stays(alpha, beta, make_job):
    add(alpha, "invoices", "billing")
    mine = add(beta, "mine", "beta-work")

    with pytest.raises(services.InvalidInput) as refused:
        services.job_update(mine, {"queue": "billing"})

    assert refused.value.field == "queue" and refused.value.message.startswith(REFUSED)
    # Two tenants already sharing a queue (jobs saved before this check) keep editing their jobs.
    shared = make_job(tenant=beta, queue="billing")
    services.job_update(shared, {"description": "still here"})
    assert Job.objects.get(id=shared.id).description == "still here"


@pytest.mark.parametrize(
    "queue, setting",
    [
        ("", {}),
        ("cronfleet", {}),  # CRONFLEET_QUEUE by name
        ("bulk", {"CRONFLEET_BATCH_QUEUES": ["bulk"]}),
        ("billing", {"CRONFLEET_QUEUES": ["billing", "reports"]}),
    ],
)
def test_shared_queues_are_open_to_every_tenant(alpha, beta, settings, queue, setting):
    for name, value in setting.items():
        setattr(settings, name, value)
    add(alpha, "first", queue)

    add(beta, "second", queue)

    assert Job.objects.filter(queue=queue).count() == 2


def test_the_check_is_a_lookup_of_job_queue_tenant_idx(alpha, beta):
    add(alpha, "invoices", "billing")

    with connection.cursor() as cursor, transaction.atomic():
        cursor.execute("SET LOCAL enable_seqscan = off")  # the tiny table would be read whole otherwise
        sql, params = (
            Job.objects.filter(queue="billing").exclude(queue="").exclude(tenant_id=beta.id).query.sql_with_params()
        )
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "job_queue_tenant_idx" in plan, plan


# --- every path that writes a job ------------------------------------------------------------


def test_the_api_answers_400_naming_the_queue(alpha, beta):
    add(alpha, "invoices", "billing")
    body = {"name": "steal", "schedule": {"every": 300}, "target": {"kind": "task", "task": TASK}, "queue": "billing"}

    refused = client_for(beta).post("/api/v1/jobs/", body, format="json")

    assert refused.status_code == 400, refused.json()
    [error] = refused.json()["errors"]
    assert error["field"] == "queue" and error["message"].startswith(REFUSED)


def test_the_cli_refuses_it_in_one_line(alpha, beta):
    add(alpha, "invoices", "billing")

    with pytest.raises(CommandError) as refused:
        call_command(
            "jobs", "add", "--tenant", "beta", "--name", "steal", "--cron", "0 * * * *", "--task", TASK,
            "--queue", "billing", stdout=io.StringIO(),
        )  # fmt: skip

    assert str(refused.value).startswith("jobs add: queue: " + REFUSED), str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_admin_form_names_the_queue_field(client, alpha, beta):
    add(alpha, "invoices", "billing")
    client.force_login(User.objects.create_superuser("root", password="pw"))

    response = client.post(reverse("admin:scheduler_app_job_add"), job_form(beta, queue="billing"))

    assert response.status_code == 200  # the form again
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["queue"] and errors["queue"][0].startswith(REFUSED)
    assert not Job.objects.filter(tenant=beta).exists()


def test_a_schedules_file_is_refused_at_plan(alpha, beta, tmp_path):
    add(alpha, "invoices", "billing")
    path = tmp_path / "beta.toml"
    path.write_text(
        f'owner = "ops"\ntenant = "beta"\n\n[[jobs]]\nname = "steal"\nevery = 600\ntask = "{TASK}"\nqueue = "billing"\n'
    )

    code, out = schedules("plan", "--file", str(path))

    assert code != 0 and REFUSED in out, out
    assert not Job.objects.filter(tenant=beta).exists()


def test_import_beat_skips_the_row_naming_the_queue(alpha, beta):
    add(alpha, "invoices", "billing")
    PeriodicTask.objects.create(
        name="steal", task=TASK, queue="billing", crontab=CrontabSchedule.objects.create(minute="0")
    )

    report = importbeat.import_schedules(beta, from_db=True, from_settings=False, dry_run=False, disable_source=False)

    [found] = report.outcomes
    assert found.result == "skipped" and found.notes[0].startswith("queue: " + REFUSED), found.notes
    assert not Job.objects.filter(tenant=beta).exists()


def test_a_tenant_document_naming_another_tenants_queue_is_refused(alpha):
    add(alpha, "invoices", "billing")
    moving = services.tenant_create(slug="moving", name="Moving")
    add(moving, "own", "moving-work")
    written: list[dict] = []
    services.tenant_export(moving, db_now() + timedelta(days=1), write=written.append, actor="test")
    document = json.loads(tenantmove.dumps(written[0]))
    document["tenant"]["slug"] = "moved"
    document["jobs"][0]["queue"] = "billing"

    with pytest.raises(services.InvalidInput) as refused:
        tenantmove.tenant_import(document, actor="test")

    assert refused.value.field == "job 'own': queue" and refused.value.message.startswith(REFUSED)
    assert not Tenant.objects.filter(slug="moved").exists()


# --- the race ---------------------------------------------------------------------------------


def advisory_waiters() -> int:
    """Connections of this database waiting for an advisory lock now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # else a transaction reads one snapshot
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)  # the racer's own connection sees the first one's commit
def test_two_tenants_claiming_a_fresh_queue_at_once_cannot_both_win():
    alpha = services.tenant_create(slug="alpha", name="Alpha")
    beta = services.tenant_create(slug="beta", name="Beta")
    outcome: list[BaseException | Job] = []

    def claim() -> None:
        try:
            outcome.append(add(beta, "second", "fresh"))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome.append(exc)
        finally:
            connections.close_all()

    racer = threading.Thread(target=claim)
    with transaction.atomic():
        add(alpha, "first", "fresh")  # saved, not committed: invisible to the racer
        racer.start()
        # Until the racer waits for the queue's lock, or (without the lock) has saved its job.
        wait_for(lambda: outcome or advisory_waiters(), timeout=30, what="the racer")
    racer.join(timeout=30)

    assert not racer.is_alive()
    [result] = outcome
    assert isinstance(result, services.InvalidInput) and result.field == "queue", result
    assert list(Job.objects.filter(queue="fresh").values_list("tenant__slug", flat=True)) == ["alpha"]


@pytest.mark.django_db(transaction=True)  # each apply commits on its own connection
def test_two_applies_naming_fresh_queues_in_opposite_orders_never_deadlock(tmp_path):
    # Alpha's file saves a job on q1 then one on q2, beta's on q2 then q1. Locked one by one as
    # each job is saved, beta would hold q2 and wait for q1 while alpha holds q1 and waits for
    # q2: PostgreSQL would abort one apply with a deadlock error. apply_plan locks them sorted.
    services.tenant_create(slug="alpha", name="Alpha")
    services.tenant_create(slug="beta", name="Beta")
    files = {}
    for tenant, queues in (("alpha", ("q1", "q2")), ("beta", ("q2", "q1"))):
        jobs = "".join(
            f'\n[[jobs]]\nname = "j{n}"\nevery = 600\ntask = "{TASK}"\nqueue = "{queue}"\n'
            for n, queue in enumerate(queues)
        )
        files[tenant] = tmp_path / f"{tenant}.toml"
        files[tenant].write_text(f'owner = "ops"\ntenant = "{tenant}"\n{jobs}')
    outcome: dict[str, tuple[int, str] | BaseException] = {}

    def apply(tenant: str) -> None:
        try:
            outcome[tenant] = schedules("apply", "--file", str(files[tenant]))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome[tenant] = exc
        finally:
            connections.close_all()

    appliers = {tenant: threading.Thread(target=apply, args=(tenant,)) for tenant in files}
    with transaction.atomic():
        lock_names(["cronfleet.queue:q2"])  # held until both appliers wait
        appliers["beta"].start()  # waits for q2
        wait_for(lambda: advisory_waiters() >= 1 or outcome, timeout=30, what="beta waiting for q2")
        assert not outcome, outcome
        appliers["alpha"].start()
        wait_for(lambda: advisory_waiters() >= 2, timeout=30, what="alpha waiting too")
    for thread in appliers.values():
        thread.join(timeout=60)

    assert not any(thread.is_alive() for thread in appliers.values())
    results = sorted(outcome.values(), key=lambda result: result[0] if isinstance(result, tuple) else -1)
    assert all(isinstance(result, tuple) for result in results), outcome  # no deadlock error
    (won, won_out), (lost, lost_out) = results
    assert won == 0 and "2 created" in won_out, outcome
    assert lost == 1 and "queue 'q" in lost_out and "used by another tenant's jobs" in lost_out, outcome
    owners = set(Job.objects.filter(queue__in=("q1", "q2")).values_list("tenant__slug", flat=True))
    assert len(owners) == 1 and Job.objects.filter(queue__in=("q1", "q2")).count() == 2
