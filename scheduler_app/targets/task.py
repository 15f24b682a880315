"""Task targets: a Celery task registered in the worker, named in CRONFLEET_ALLOWED_TASKS, run
in the worker process with the fire it runs for (scheduler_app.fire.current_fire())."""

from __future__ import annotations

from dataclasses import replace

from celery import current_app as app

from scheduler_app.conf import app_settings
from scheduler_app.fire import FireContext, firing
from scheduler_app.ledger.chains import parent_fire
from scheduler_app.targets.base import PermanentFailure
from scheduler_app.validation import InvalidInput


def check(spec, tenant: str | None = None) -> dict:
    """The target_config of a task job (none: the task's name is a column of its own)."""
    if spec.task_name not in app_settings.ALLOWED_TASKS:
        allowed = ", ".join(app_settings.ALLOWED_TASKS) or "(none)"
        raise InvalidInput("task", f"{spec.task_name!r} is not an allowed task (allowed: {allowed})")
    return {}


def perform(started):
    """Run the job's task in this worker process and return its result."""
    run, job = started.run, started.job
    if job.task_name not in app_settings.ALLOWED_TASKS:
        raise PermanentFailure(f"task {job.task_name!r} is not in CRONFLEET_ALLOWED_TASKS")
    if job.task_name not in app.tasks:
        app.loader.import_default_modules()  # tasks.py of every installed app
    try:
        task = app.tasks[job.task_name]
    except KeyError:
        raise PermanentFailure(f"task {job.task_name!r} is not registered in this worker") from None
    context = FireContext(
        fire_key=run.fire_key, attempt=run.attempt, scheduled_at=run.scheduled_at,
        run_id=run.id, job_id=job.id, job_name=job.name, tenant=started.tenant,
    )
    if run.parent_run_id is not None:  # a chained run: its parent's fire (one query)
        parent_key, parent_id = parent_fire(run)
        context = replace(context, parent_fire_key=parent_key, parent_run_id=parent_id)
    with firing(context):
        return task(*job.args, **job.kwargs)
