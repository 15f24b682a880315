"""Task targets: a Celery task the host's Celery app registers, run in the worker process with
the fire it runs for (scheduler_app.fire.current_fire()).

Who may name which task:
- the API (tenants' keys, staff keys and sessions alike), the command line, import_beat and
  schedules as code name the tasks CRONFLEET_ALLOWED_TASKS allows: exact names, or fnmatch
  patterns ("billing.*", "reports.daily_*") that match dotted task names. task_allowed() is
  the one check, wherever the allow-list is read;
- staff in the admin's job forms (with the add or change job permission) choose among every
  task the Celery app registers, as django-celery-beat's admin offers them, beyond the
  allow-list too: the services take `any_registered=True` from that path only. A job so made
  is marked (target_config {"chosen_in_admin": true}), so that the worker runs it and an edit
  elsewhere that keeps its task (a tenant moving its schedule through the API) is not refused
  for a task it did not name; naming another task there is checked as ever.

The worker checks again before each run: a task taken off the allow-list stops running, but
on the jobs staff chose it for. Neither pattern nor admin ever offers Cronfleet's own run
tasks or Celery's internals: they take run ids, not work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from fnmatch import fnmatchcase

from celery import current_app as app

from scheduler_app import hints, taskapi
from scheduler_app.conf import app_settings
from scheduler_app.fire import FireContext, firing
from scheduler_app.ledger.chains import parent_fire
from scheduler_app.queues import EXECUTE_HTTP_RUNS, EXECUTE_RUN, EXECUTE_RUNS
from scheduler_app.targets import djangotask
from scheduler_app.targets.base import PermanentFailure
from scheduler_app.validation import InvalidInput

SETTING = "CRONFLEET_ALLOWED_TASKS"
CHOSEN_IN_ADMIN = "chosen_in_admin"  # the target_config key of a task staff chose beyond the allow-list
INTERNAL_TASKS = frozenset({EXECUTE_RUN, EXECUTE_RUNS, EXECUTE_HTTP_RUNS})
MAX_TASK_NAME = 200  # Job.task_name's max_length
# A task name a pattern may match: dotted Python names. Without this, "billing.*" would allow
# "billing.x; anything" or a name too long to save.
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
PATTERN_CHARACTERS = frozenset("*?[")


def is_pattern(entry: str) -> bool:
    return bool(PATTERN_CHARACTERS.intersection(entry))


def is_internal(name: str) -> bool:
    """Cronfleet's run tasks and Celery's own (celery.backend_cleanup, celery.chord_unlock, ...)."""
    return name in INTERNAL_TASKS or name.startswith("celery.")


def looks_like_task_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= MAX_TASK_NAME and TASK_NAME.match(name) is not None


def task_allowed(name: object, allowed: Iterable[str] | None = None) -> bool:
    """Whether CRONFLEET_ALLOWED_TASKS (or `allowed`) allows task `name`: listed as it is (an
    exact entry allows its name whatever it looks like, as before patterns), or matched by a
    pattern entry, which matches only dotted task names and never an internal task."""
    entries = list(app_settings.ALLOWED_TASKS if allowed is None else allowed)
    if not isinstance(name, str) or not name:
        return False
    if name in entries:
        return True
    if not looks_like_task_name(name) or is_internal(name):
        return False
    return any(is_pattern(entry) and fnmatchcase(name, entry) for entry in entries)


def suggested_pattern(name: str) -> str:
    """'billing.*' for 'billing.extract': the pattern a refusal offers ('' for an undotted name)."""
    package = name.rpartition(".")[0] if looks_like_task_name(name) else ""
    return f"{package}.*" if package else ""


def allowed_text() -> str:
    return ", ".join(app_settings.ALLOWED_TASKS) or "(none)"


def refusal(name: object) -> str:
    """The message of InvalidInput("task", ...) for a task the allow-list does not allow: one
    line, naming the setting (the API shows it to a tenant, who passes it on to the operator)."""
    pattern = suggested_pattern(name) if isinstance(name, str) else ""
    add = f"add it (or a pattern such as {pattern!r})" if pattern else "add it"
    return f"{name!r} is not an allowed task: {add} to {SETTING} in your settings (allowed now: {allowed_text()})"


def registered_tasks() -> list[str]:
    """The tasks the Celery app registers that a job may call, sorted: its modules imported first
    (the tasks.py of every installed app, as a worker does at start and django-celery-beat's
    admin before listing them), then every task but the internal ones."""
    app.loader.import_default_modules()
    return sorted(name for name in app.tasks if not is_internal(name))


def chosen_in_admin(job) -> bool:
    """Whether staff chose `job`'s task in the admin beyond the allow-list (see the module)."""
    return bool((job.target_config or {}).get(CHOSEN_IN_ADMIN))


def check(spec, tenant: str | None = None, *, any_registered: bool = False, kept: str = "") -> dict:
    """The target_config of a task job (the task's name is a column of its own): {} for a task
    the allow-list allows. `any_registered` (the admin's staff only) accepts any task the Celery
    app registers; `kept` is a task staff chose for the job being edited, which an edit that
    keeps it keeps. Either way beyond the allow-list, the job is marked CHOSEN_IN_ADMIN."""
    name = spec.task_name
    if name == "":
        raise InvalidInput(
            "task", "the job has no target: name a task, or give it another one (http, command, sql, a check-in)"
        )
    if taskapi.is_task_name(name):  # a django.tasks task: its backend's tenant only (djangotask.py)
        return djangotask.check(name, tenant)
    if task_allowed(name):
        return {}
    if kept and name == kept:
        return {CHOSEN_IN_ADMIN: True}
    if any_registered:
        if isinstance(name, str) and not is_internal(name) and name in registered_tasks():
            return {CHOSEN_IN_ADMIN: True}
        raise InvalidInput(
            "task",
            f"{name!r} is neither allowed by {SETTING} nor a task your Celery app "
            f"registers (staff may choose any of those)",
        )
    raise InvalidInput("task", refusal(name))


def perform(started):
    """Run the job's task in this worker process and return its result."""
    run, job = started.run, started.job
    django_task = taskapi.is_task_name(job.task_name)
    if not (django_task or task_allowed(job.task_name) or chosen_in_admin(job)):
        raise PermanentFailure(
            f"task {job.task_name!r} is not in {SETTING} (taken off it since the job was saved?): "
            "allow it in the settings, or have staff choose it in the admin"
        )
    context = FireContext(
        fire_key=run.fire_key,
        attempt=run.attempt,
        scheduled_at=run.scheduled_at,
        run_id=run.id,
        job_id=job.id,
        job_name=job.name,
        tenant=started.tenant,
    )
    if run.parent_run_id is not None:  # a chained run: its parent's fire (one query)
        parent_key, parent_id = parent_fire(run)
        context = replace(context, parent_fire_key=parent_key, parent_run_id=parent_id)
    with firing(context):
        if django_task:
            return djangotask.perform(started, job.args, job.kwargs)
        return celery_task(job.task_name)(*job.args, **job.kwargs)


def celery_task(name: str):
    if name not in app.tasks:
        app.loader.import_default_modules()  # tasks.py of every installed app
    try:
        return app.tasks[name]
    except KeyError:
        raise PermanentFailure(
            f"task {name!r} is not registered in this worker: its Celery app "
            f"({hints.celery_app_argument()}) does not import the task's module"
        ) from None
