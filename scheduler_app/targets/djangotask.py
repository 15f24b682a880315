"""Task targets that name a `django.tasks` task (task_name "django:<module path>"), made by
Cronfleet's task backend (scheduler_app/djangotasks/): an enqueued call, or a periodic task
declared in code.

A job may name such a task only for the tenant of the Cronfleet backend the task is bound to
(scheduler_app.taskapi), so a tenant cannot call another's tasks, nor a task the host did not
put on Cronfleet. The worker imports the task by its path and calls it with the job's args
and kwargs, inside the fire (scheduler_app.fire.current_fire()); a task that takes its
context gets Django's TaskContext, whose attempt is the run's.

A task's own exception is kept as "<exception class path>: <message>" and its traceback, so
that get_result() gives Django's TaskError back; it is retried by the job's policy.
"""

from __future__ import annotations

import json
import traceback

from celery.exceptions import SoftTimeLimitExceeded
from django.utils.module_loading import import_string

from scheduler_app import taskapi
from scheduler_app.targets.base import PermanentFailure, RetryableFailure
from scheduler_app.validation import InvalidInput


def module_path(task_name: str) -> str:
    return task_name[len(taskapi.PREFIX) :]


def check(task_name: str, tenant: str | None) -> dict:
    """A job of `tenant` may name the task if its Cronfleet backend writes to that tenant."""
    path = module_path(task_name)
    if tenant is None or tenant not in taskapi.bound_tenants(path):
        raise InvalidInput(
            "task",
            f"{path!r} is not a django.tasks task bound to a Cronfleet task backend of tenant "
            f"{tenant!r} (TASKS' BACKEND and its OPTIONS TENANT)",
        )
    return {}


def load(task_name: str, tenant: str):
    """The task object, or PermanentFailure in one line naming it."""
    path = module_path(task_name)
    try:
        task = import_string(path)
    except ImportError as exc:
        raise PermanentFailure(f"django task {path!r} is not importable in this worker: {exc}") from None
    api = taskapi.api
    if api is None or not isinstance(task, api.base.Task):
        raise PermanentFailure(f"django task {path!r} is not a django.tasks task in this worker")
    if tenant not in taskapi.bound_tenants(path):
        raise PermanentFailure(f"django task {path!r} is not bound to a Cronfleet task backend of tenant {tenant!r}")
    return task


def perform(started, args: list, kwargs: dict) -> str:
    """Call the task once; its return value as JSON text (the run's result)."""
    job = started.job
    task = load(job.task_name, started.tenant)
    try:
        if task.takes_context:
            value = task.call(context(task, started, args, kwargs), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
    except (PermanentFailure, RetryableFailure, SoftTimeLimitExceeded):
        raise
    except Exception as exc:  # noqa: BLE001 - the task's own error, retried by the job's policy
        raise RetryableFailure(error_text(exc)) from exc
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise PermanentFailure(f"django task {module_path(job.task_name)!r} returned no JSON value: {exc}") from None


def error_text(exc: BaseException) -> str:
    """'<module>.<class>: <message>' on the first line, then the traceback."""
    kind = type(exc)
    path = f"{kind.__module__}.{kind.__qualname__}"
    message = str(exc).splitlines()[0] if str(exc) else ""
    return f"{path}: {message}\n" + "".join(traceback.format_exception(exc))


def context(task, started, args: list, kwargs: dict):
    """Django's TaskContext for this attempt: its result says the run's id (the job's), times
    and attempt (one worker id per attempt so far)."""
    api = taskapi.require()
    run = started.run
    result = api.TaskResult(
        task=task,
        id=str(run.job_id),
        status=api.TaskResultStatus.RUNNING,
        enqueued_at=run.enqueued_at,
        started_at=run.started_at,
        finished_at=None,
        last_attempted_at=run.started_at,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[run.worker] * run.attempt,
    )
    return api.TaskContext(task_result=result)
