"""Cronfleet as a `django.tasks` backend: TASKS = {"default": {"BACKEND":
"scheduler_app.djangotasks.CronfleetBackend", "OPTIONS": {"TENANT": "..."}}}.

enqueue() records the call as a one-off job of the backend's tenant, and its run when due,
in the caller's transaction (services/taskcalls.py); the run goes to the broker after commit
and runs in the host's Celery worker like every run (compare-and-set start, fenced end,
retries by the job's policy). run_after is the job's instant, fired by the beats.
get_result(id) reads the job (the result's id) and its latest run.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from scheduler_app import services, taskapi
from scheduler_app.djangotasks import results
from scheduler_app.models import Job, JobRun, Tenant

api = taskapi.require()

DEFAULT_TENANT = "default"
# OPTIONS beside TENANT: the retry policy and time limit of enqueued calls (JobSpec's fields).
JOB_OPTIONS = {
    "MAX_ATTEMPTS": "max_attempts",
    "RETRY_BACKOFF_SECONDS": "retry_backoff_seconds",
    "RETRY_BACKOFF_MAX_SECONDS": "retry_backoff_max_seconds",
    "TIMEOUT_SECONDS": "timeout_seconds",
}
TAG = taskapi.CALL_TAG
NAME_ROOM = 180  # of Job.name's 200 characters, for the task's path (the rest: '#' and a token)


def cronfleet_priority(priority: int) -> int:
    """Django's priority (-100..100, default 0) on Cronfleet's (0..9, default 5), in order."""
    if priority > 0:
        return 5 + -(-priority * 4 // 100)  # 1..100 -> 6..9
    return 5 + priority * 5 // 100  # -100..0 -> 0..5


def cronfleet_queue(queue_name: str) -> str:
    """Django's default queue is Cronfleet's default queue (blank); others by their name."""
    return "" if queue_name == api.DEFAULT_TASK_QUEUE_NAME else queue_name


class CronfleetBackend(taskapi.BaseTaskBackend):
    supports_defer = True
    supports_get_result = True
    supports_priority = True
    # Coroutine tasks run to completion in the worker (Task.call runs them with async_to_sync).
    supports_async_task = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        self.tenant = options.pop("TENANT", DEFAULT_TENANT)
        if not isinstance(self.tenant, str) or not self.tenant:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['TENANT'] must be a tenant's slug")
        unknown = sorted(set(options) - set(JOB_OPTIONS))
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'][{unknown[0]!r}]: unknown option (known: TENANT, {', '.join(JOB_OPTIONS)})"
            )
        self.job_options = {JOB_OPTIONS[key]: value for key, value in options.items()}

    def validate_task(self, task) -> None:
        super().validate_task(task)
        taskapi.bind(task.module_path, task.func.__module__, self.tenant)

    def tenant_row(self) -> Tenant:
        try:
            return Tenant.objects.get(slug=self.tenant)
        except Tenant.DoesNotExist:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: no tenant {self.tenant!r}: make it (manage.py tenants add "
                f"{self.tenant}) or name another in OPTIONS TENANT"
            ) from None

    def spec(self, task, args: Any, kwargs: Any, name: str) -> services.JobSpec:
        return services.JobSpec(
            name=name,
            task_name=taskapi.task_name(task.module_path),
            args=list(args),
            kwargs=dict(kwargs),
            queue=cronfleet_queue(task.queue_name),
            priority=cronfleet_priority(task.priority),
            tags=[TAG],
            **self.job_options,
        )

    def enqueue(self, task, args, kwargs):
        """Record the call (and its run, when due now) in the caller's transaction; its
        TaskResult, whose id is the call's job id."""
        self.validate_task(task)
        result = api.TaskResult(  # checks args and kwargs are JSON, as Django's backends do
            task=task,
            id="",
            status=api.TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        name = f"{task.module_path[:NAME_ROOM]}#{secrets.token_hex(6)}"
        job, run = services.task_call_record(
            self.tenant_row(),
            self.spec(task, result.args, result.kwargs, name),
            run_after=task.run_after,
            actor=f"tasks:{self.alias}",
        )
        return results.task_result(task, job, run, backend=self.alias)

    def get_result(self, result_id: str):
        """The call's TaskResult as its job and latest run say now (ResultDoesNotExist for an
        id that is not a django.tasks job of this backend's tenant)."""
        job, run = self.read(result_id)
        task = self.task_of(job)
        return results.task_result(task, job, run, backend=self.alias)

    def read(self, result_id: str) -> tuple[Job, JobRun | None]:
        found = None
        if str(result_id).isdigit():
            found = (
                Job.objects.filter(id=int(result_id), tenant__slug=self.tenant, task_name__startswith=taskapi.PREFIX)
                .only("id", "task_name", "args", "kwargs", "tenant_id")
                .first()
            )
        if found is None:
            raise taskapi.ResultDoesNotExist(result_id)
        return found, JobRun.objects.filter(job_id=found.id).order_by("-scheduled_at").first()

    def task_of(self, job: Job):
        path = job.task_name[len(taskapi.PREFIX) :]
        try:
            task = import_string(path)
        except ImportError:
            raise taskapi.ResultDoesNotExist(f"{job.id}: its task {path!r} is not importable here") from None
        return task.using(backend=self.alias) if task.backend != self.alias else task
