"""The host's own Celery tasks as jobs' targets, on the database: staff in the admin choose among
the registered tasks (beyond the allow-list too) while a tenant's API key stays within it; the
worker runs what staff chose; the hints of `jobs add` and `import_beat` name the host's Celery
app and its settings. The patterns themselves are tests/unit/targets/test_host_tasks.py."""

from __future__ import annotations

from io import StringIO

import pytest
from celery import current_app
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.models import Job, JobRun
from scheduler_app.targets import task as task_target
from scheduler_app.validation import InvalidInput
from scheduler_app.worker import delivery, execution
from tests.support import admin
from tests.unit.targets.test_host_tasks import HOST_TASK, extract  # noqa: F401 (extract: the host's task, registered)

DEFAULT_ALLOWED = ["scheduler_app.echo", "scheduler_app.fail", "scheduler_app.sleep"]  # tests/settings.py's


# --- who may name what -------------------------------------------------------------------------


def admin_url(view: str, *args) -> str:
    return reverse(f"admin:scheduler_app_job_{view}", args=args)


def job_form(tenant, **overrides) -> dict:
    """The add page's form for a job of the host's task."""
    return admin.job_form(
        tenant, **{"name": "host-task", "task_name": HOST_TASK, "kwargs": '{"day": "monday"}', **overrides}
    )


def choice_values(choices) -> dict[str, list[str]]:
    """{group label: [values]} of a grouped ChoiceField."""
    return {str(group): [value for value, _ in options] for group, options in choices if isinstance(options, list)}


@pytest.fixture
def staff_client(client, django_user_model):
    """A staff user (not a superuser) who may add and change jobs."""
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="scheduler_app", codename__in=["add_job", "change_job", "view_job"]
        )
    )
    client.force_login(user)
    return client


def test_the_admin_add_form_offers_the_registered_tasks_allowed_ones_first(staff_client, tenant):
    response = staff_client.get(admin_url("add"))

    groups = choice_values(response.context["adminform"].form.fields["task_name"].choices)
    allowed, others = groups.pop(next(iter(groups))), groups.pop(next(iter(groups)))
    assert set(DEFAULT_ALLOWED) <= set(allowed) and HOST_TASK not in allowed
    assert HOST_TASK in others and not set(DEFAULT_ALLOWED) & set(others)
    everything = allowed + others
    assert not [name for name in everything if name.startswith("celery.") or name in task_target.INTERNAL_TASKS]
    html = response.content.decode()
    assert f'<option value="{HOST_TASK}">' in html and 'value="scheduler_app.execute_run"' not in html


def test_staff_make_a_job_of_a_registered_task_beyond_the_allow_list_and_the_worker_runs_it(
    staff_client, tenant, make_run
):
    response = staff_client.post(admin_url("add"), job_form(tenant))

    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(name="host-task")
    assert (job.task_name, job.target_config) == (HOST_TASK, {task_target.CHOSEN_IN_ADMIN: True})
    run = make_run(job)

    outcome = execution.execute_run(run.id, 1, worker="w")

    run.refresh_from_db()
    assert (outcome.state, run.state) == ("succeeded", "succeeded") and "extracted monday" in run.result
    shown = StringIO()
    call_command("jobs", "show", str(job.id), stdout=shown)
    assert '{"chosen_in_admin": true}' in shown.getvalue()  # target_config: why the CLI may keep, not name, it


def test_a_tenant_key_cannot_name_that_task_but_may_edit_the_job_staff_made_with_it(staff_client, tenant):
    key, raw = services.apikey_create(tenant=tenant, name="tenant key")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {"name": "mine", "schedule": {"every": 300}, "target": {"kind": "task", "task": HOST_TASK}}

    refused = api.post("/api/v1/jobs/", body, format="json")

    assert refused.status_code == 400, refused.json()
    [error] = refused.json()["errors"]
    assert error["field"] == "target.task" and "CRONFLEET_ALLOWED_TASKS" in error["message"]
    assert not Job.objects.filter(name="mine").exists()

    assert staff_client.post(admin_url("add"), job_form(tenant)).status_code == 302
    job = Job.objects.get(name="host-task")
    moved = api.patch(f"/api/v1/jobs/{job.id}/", {"schedule": {"every": 600}}, format="json")
    assert moved.status_code == 200, moved.json()  # the task it keeps is staff's choice, not the tenant's
    job.refresh_from_db()
    assert (job.every_seconds, job.task_name, job.target_config) == (600, HOST_TASK, {"chosen_in_admin": True})
    other = api.patch(f"/api/v1/jobs/{job.id}/", {"target": {"kind": "task", "task": "hosttests.other"}}, format="json")
    assert other.status_code == 400 and other.json()["errors"][0]["field"] == "target.task"


def test_staff_choosing_an_allowed_task_leave_no_mark_and_the_change_form_keeps_a_chosen_one(staff_client, tenant):
    assert staff_client.post(admin_url("add"), job_form(tenant, task_name="scheduler_app.echo")).status_code == 302
    job = Job.objects.get(name="host-task")
    assert job.target_config == {}

    page = staff_client.get(admin_url("change", job.pk))
    groups = choice_values(page.context["adminform"].form.fields["task_name"].choices)
    assert HOST_TASK in [value for values in groups.values() for value in values]
    form = {key: value for key, value in job_form(tenant, timezone=job.timezone).items() if key != "tenant"}
    changed = staff_client.post(admin_url("change", job.pk), form)

    assert changed.status_code == 302, changed.context["adminform"].form.errors
    job.refresh_from_db()
    assert (job.task_name, job.target_config) == (HOST_TASK, {"chosen_in_admin": True})


def test_the_services_accept_beyond_the_allow_list_only_when_asked(tenant):
    spec = services.JobSpec(name="svc", task_name=HOST_TASK, every=60)

    with pytest.raises(InvalidInput, match="CRONFLEET_ALLOWED_TASKS"):
        services.job_create(tenant, spec)
    with pytest.raises(InvalidInput, match="nor a task your Celery app registers"):
        services.job_create(
            tenant, services.JobSpec(name="svc", task_name="hosttests.nowhere", every=60), allow_any_registered=True
        )
    with pytest.raises(InvalidInput, match="nor a task your Celery app registers"):
        services.job_create(
            tenant,
            services.JobSpec(name="svc", task_name="scheduler_app.execute_run", every=60),
            allow_any_registered=True,
        )
    assert services.job_create(tenant, spec, allow_any_registered=True).task_name == HOST_TASK


def test_the_worker_refuses_a_task_taken_off_the_allow_list_unless_staff_chose_it(make_job, make_run, settings):
    settings.CRONFLEET_ALLOWED_TASKS = ["hosttests.*"]
    allowed, chosen = (
        make_job(task_name=HOST_TASK),
        make_job(task_name="scheduler_app.echo", target_config={"chosen_in_admin": True}),
    )
    dropped = make_job(task_name="scheduler_app.echo")
    runs = [make_run(job) for job in (allowed, chosen, dropped)]

    states = [execution.execute_run(run.id, 1, worker="w").state for run in runs]

    assert states == ["succeeded", "succeeded", "failed"]
    assert "'scheduler_app.echo' is not in CRONFLEET_ALLOWED_TASKS" in JobRun.objects.get(id=runs[2].id).error


def test_an_allowed_task_no_worker_registers_is_saved_and_its_run_says_so(tenant, make_run, settings):
    settings.CRONFLEET_ALLOWED_TASKS = ["hosttests.*"]
    job = services.job_create(tenant, services.JobSpec(name="nowhere", task_name="hosttests.nowhere", every=60))
    run = make_run(job)

    outcome = execution.execute_run(run.id, 1, worker="w")

    run.refresh_from_db()
    assert (outcome.state, run.state) == ("failed", "failed")  # not retried: another attempt would not find it
    assert run.error.startswith("task 'hosttests.nowhere' is not registered in this worker")


def test_a_failed_run_names_the_task_it_called_where_celery_and_flower_show_it(make_job, make_run):
    run = make_run(make_job(task_name="scheduler_app.fail", max_attempts=1))
    outcome = execution.execute_run(run.id, 1, worker="w")
    request = type("Request", (), {"delivery_info": {}, "args": [run.id, 1], "id": "t", "hostname": "w"})
    task = type("Task", (), {"request": request, "name": "scheduler_app.execute_run"})

    with pytest.raises(delivery.RunFailed) as failed:
        delivery.report(task, outcome)

    assert str(failed.value).startswith(f"run {run.id} attempt 1 dead: RuntimeError")
    assert str(failed.value).endswith(" (task scheduler_app.fail)")


# --- hints ---------------------------------------------------------------------------------------


def test_jobs_add_names_the_celery_app_and_the_setting(tenant, queue_name):
    err = StringIO()
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "hinted",
        "--every",
        "60",
        "--task",
        "scheduler_app.echo",
        "--queue",
        queue_name,
        stdout=StringIO(),
        stderr=err,
    )

    default = current_app.conf.task_default_queue
    assert (
        f"start a worker of your Celery app (cronfleet) that consumes queue '{queue_name}' "
        f"(celery -A project worker -Q {default},{queue_name})"
    ) in err.getvalue()

    with pytest.raises(
        Exception,
        match=r"task: 'billing.extract' is not an allowed task: add it \(or a pattern "
        r"such as 'billing\.\*'\) to CRONFLEET_ALLOWED_TASKS in your settings",
    ):
        call_command(
            "jobs",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            "refused",
            "--every",
            "60",
            "--task",
            "billing.extract",
            stdout=StringIO(),
            stderr=StringIO(),
        )


def test_import_beat_names_the_setting_in_the_host_s_settings_and_its_celery_app(tenant, settings):
    settings.CELERY_BEAT_SCHEDULE = {"close": {"task": "billing.tasks.close_day", "schedule": 60.0}}
    out = StringIO()

    call_command("import_beat", "--tenant", tenant.slug, "--from-settings", "--dry-run", stdout=out, stderr=StringIO())

    text = out.getvalue()
    assert (
        "allow them in CRONFLEET_ALLOWED_TASKS in your Django settings (the CRONFLEET_ALLOWED_TASKS "
        "environment variable in Cronfleet's own deployment), by name or by a pattern such as "
        "'billing.tasks.*'; the workers of your Celery app (celery -A project) must import the tasks"
    ) in text
    lines = text.splitlines()
    assert f"  CRONFLEET_ALLOWED_TASKS = {[*DEFAULT_ALLOWED, 'billing.tasks.close_day']!r}" in lines
    assert f"  CRONFLEET_ALLOWED_TASKS={','.join(DEFAULT_ALLOWED)},billing.tasks.close_day" in lines
    assert "an environment variable;" not in text


def test_import_beat_imports_a_task_a_pattern_allows(tenant, settings):
    settings.CRONFLEET_ALLOWED_TASKS = ["billing.*"]
    settings.CELERY_BEAT_SCHEDULE = {"close": {"task": "billing.tasks.close_day", "schedule": 60.0}}

    call_command("import_beat", "--tenant", tenant.slug, "--from-settings", stdout=StringIO(), stderr=StringIO())

    assert Job.objects.get(tenant=tenant, name="close").task_name == "billing.tasks.close_day"
