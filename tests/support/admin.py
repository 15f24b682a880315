"""What the admin's tests share: its pages' URLs, the forms of a job's add and change pages, and
an action posted on the job list."""

from __future__ import annotations

from django.urls import reverse

from scheduler_app.models import Job, Tenant

TASK = "scheduler_app.echo"


def url(model: str, view: str, *args) -> str:
    return reverse(f"admin:scheduler_app_{model}_{view}", args=args)


def post_action(client, action: str, *jobs: Job):
    return client.post(
        url("job", "changelist"), {"action": action, "_selected_action": [j.pk for j in jobs]}, follow=True
    )


def job_form(tenant: Tenant, **overrides) -> dict:
    data = {
        "tenant": tenant.pk,
        "name": "from-admin",
        "description": "",
        "tags": "[]",
        "cron": "30 7 * * *",
        "timezone": "",
        "every_seconds": "",
        "run_at_0": "",
        "run_at_1": "",
        "start_at_0": "",
        "start_at_1": "",
        "end_at_0": "",
        "end_at_1": "",
        "task_name": TASK,
        "args": "[]",
        "kwargs": "{}",
        "queue": "",
        "timeout_seconds": "300",
        "max_attempts": "3",
        "retry_backoff_seconds": "10",
        "misfire_policy": "run_once",
        "catchup_window_seconds": "86400",
        "run_all_cap": "100",
        "priority": "5",
        "retry_backoff_max_seconds": "3600",
        "overlap_policy": "allow",
        "jitter_seconds": "0",
    }
    data.update(overrides)
    return data


def change_form(job: Job, **overrides) -> dict:
    data = {
        "name": job.name,
        "description": job.description,
        "tags": "[]",
        "cron": job.cron,
        "timezone": job.timezone,
        "every_seconds": "",
        "run_at_0": "",
        "run_at_1": "",
        "start_at_0": "",
        "start_at_1": "",
        "end_at_0": "",
        "end_at_1": "",
        "task_name": job.task_name,
        "args": "[]",
        "kwargs": "{}",
        "queue": "",
        "priority": "5",
        "timeout_seconds": "300",
        "max_attempts": "3",
        "retry_backoff_seconds": "10",
        "retry_backoff_max_seconds": "3600",
        "misfire_policy": "run_once",
        "catchup_window_seconds": "86400",
        "run_all_cap": "100",
        "overlap_policy": "allow",
        "jitter_seconds": "0",
    }
    data.update(overrides)
    return data
