"""The host's own Celery tasks as jobs' targets, the part that needs no database:
CRONFLEET_ALLOWED_TASKS takes names and patterns and names itself when it refuses; the admin's
list of registered tasks leaves out the internal ones; the hints name the host's Celery app. The
host's task registered here, HOST_TASK, is also tests/integration/targets/test_host_tasks.py's."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from celery import current_app, shared_task

from scheduler_app import hints, services
from scheduler_app.targets import task as task_target
from scheduler_app.validation import InvalidInput

HOST_TASK = "hosttests.extract"  # registered below, and in no allow-list


@shared_task(name=HOST_TASK)
def extract(day: str = "today") -> str:
    return f"extracted {day}"


# --- patterns (no database) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("billing.extract", True),
        ("billing.tasks.close_day", True),  # * crosses dots, as fnmatch does
        ("reports.daily_sales", True),
        ("scheduler_app.echo", True),  # an exact name, as before patterns
        ("odd-name!", True),  # an exact entry allows its name, whatever it looks like
        ("billing", False),
        ("billingx.extract", False),
        ("Billing.extract", False),  # case-sensitive on every platform
        ("reports.daily", False),
        ("reports.weekly_sales", False),
        ("scheduler_app.fail", False),
        ("billing.x; rm -rf /", False),  # a pattern matches task names, not any string
        ("billing.a b", False),
        ("billing.", False),
        ("billing..x", False),
        ("billing.1x", False),
        ("billing." + "x" * 200, False),  # longer than a job's task_name column
        ("", False),
        (None, False),
    ],
)
def test_patterns_match_dotted_task_names_only(name, allowed):
    entries = ["billing.*", "reports.daily_*", "scheduler_app.echo", "odd-name!"]

    assert task_target.task_allowed(name, entries) is allowed


@pytest.mark.parametrize(
    "name",
    [
        "scheduler_app.execute_run",
        "scheduler_app.execute_runs",
        "scheduler_app.execute_http_runs",
        "celery.backend_cleanup",
        "celery.chord_unlock",
    ],
)
def test_no_pattern_matches_an_internal_task(name):
    assert not task_target.task_allowed(name, ["*", "scheduler_app.*", "celery.*"])
    assert task_target.task_allowed(name, [name])  # listed by name: as before patterns


def test_the_refusal_names_the_setting_and_a_pattern_on_one_line(settings):
    settings.CRONFLEET_ALLOWED_TASKS = ["scheduler_app.echo", "reports.*"]

    with pytest.raises(InvalidInput) as refused:
        task_target.check(services.JobSpec(name="x", task_name="billing.extract"))

    assert refused.value.field == "task"
    assert refused.value.message == (
        "'billing.extract' is not an allowed task: add it (or a pattern such as 'billing.*') to "
        "CRONFLEET_ALLOWED_TASKS in your settings (allowed now: scheduler_app.echo, reports.*)"
    )
    assert task_target.check(services.JobSpec(name="x", task_name="reports.daily")) == {}


def test_the_admin_list_of_registered_tasks_leaves_out_the_internal_ones():
    registered = task_target.registered_tasks()

    assert HOST_TASK in registered and "scheduler_app.echo" in registered
    assert not [name for name in registered if name.startswith("celery.") or name in task_target.INTERNAL_TASKS]


# --- hints ---------------------------------------------------------------------------------------


def test_the_celery_app_is_named_as_celery_takes_it(monkeypatch):
    assert hints.celery_app_name() == "cronfleet"  # project.celery's Celery("cronfleet")
    assert hints.celery_app_argument() == "project"  # loaded as -A project
    # -Q replaces a worker's queues: the app's default queue stays listed (Cronfleet's own: cronfleet).
    monkeypatch.setitem(current_app.conf, "task_default_queue", "celery")
    assert hints.worker_command(["cronfleet"]) == "celery -A project worker -Q celery,cronfleet"
    assert hints.worker_command(["celery"]) == "celery -A project worker -Q celery"
    monkeypatch.delitem(sys.modules, "project.celery")
    assert hints.celery_app_argument() == "cronfleet"  # its name, when no proj.celery module holds it


def test_a_job_without_a_target_is_told_so_not_that_a_blank_task_is_refused():
    with pytest.raises(InvalidInput) as refused:
        task_target.check(SimpleNamespace(task_name=""))

    assert refused.value.field == "task"
    assert refused.value.message.startswith("the job has no target: name a task, or give it another one")
