"""Periodic tasks declared beside the task, on Django 6.0 and on the backport alike:

    @periodic(cron="0 3 * * *", timezone="Europe/Paris", max_attempts=5)
    @task
    def close_day(): ...

Each declaration is a job of schedules as code (docs/schedules-as-code.md) under the owner
"code:<the task's module>", in the tenant of the task's Cronfleet backend: `manage.py schedules
plan` shows it, `apply` makes or changes it, drift is reported, and a declaration taken away
is paused or deleted as `--prune` says. The beats fire it like every job.
"""

from __future__ import annotations

from typing import Any

from scheduler_app import taskapi
from scheduler_app.djangotasks.backend import cronfleet_priority, cronfleet_queue

# The schedule's own keys; any other keyword is a job field (max_attempts, misfire_policy,
# overlap_policy, calendar, catchup_window_seconds, ...), checked when plan reads it.
SCHEDULE_KEYS = ("cron", "every", "timezone")


def periodic(cron: str = "", *, every: int | None = None, timezone: str = "", name: str = "", **options: Any):
    """Declare that the task below runs on a schedule: a cron expression (in `timezone`) or
    every N seconds; `name` defaults to the task's path; `args`/`kwargs` are passed to it."""

    def declare(task):
        if taskapi.api is None or not isinstance(task, taskapi.api.base.Task):
            raise TypeError("@periodic(...) goes above @task: it declares a schedule for a django.tasks task")
        backend = task.get_backend()
        tenant = getattr(backend, "tenant", None)
        if not hasattr(backend, "job_options") or not isinstance(tenant, str):
            raise TypeError(
                f"@periodic: task {task.module_path!r} is on backend {task.backend!r}, not a Cronfleet task backend"
            )
        table: dict[str, Any] = {"name": name or task.module_path, "task": taskapi.task_name(task.module_path)}
        table.update({key: value for key, value in (("cron", cron), ("every", every)) if value})
        if timezone:
            table["timezone"] = timezone
        queue = cronfleet_queue(task.queue_name)
        if queue:
            table["queue"] = queue
        table.update({"priority": cronfleet_priority(task.priority), **backend.job_options, **options})
        taskapi.declare_periodic(task.func.__module__, tenant, table)
        return task

    return declare
