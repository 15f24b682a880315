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


def change_form(job: Job, **overrides) -> dict:
    """What a job's change page posts when saved as it shows the job, with `overrides`."""
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
        "priority": str(job.priority),
        "timeout_seconds": str(job.timeout_seconds),
        "max_attempts": str(job.max_attempts),
        "retry_backoff_seconds": str(job.retry_backoff_seconds),
        "retry_backoff_max_seconds": str(job.retry_backoff_max_seconds),
        "misfire_policy": str(job.misfire_policy),
        "catchup_window_seconds": str(job.catchup_window_seconds),
        "run_all_cap": str(job.run_all_cap),
        "overlap_policy": str(job.overlap_policy),
        "jitter_seconds": str(job.jitter_seconds),
        "calendar_policy": str(job.calendar_policy),
    }
    data.update(overrides)
    return data


def job_form(tenant: Tenant, **overrides) -> dict:
    """What the add page posts for a new job of `tenant` with the defaults it shows: a task
    job named from-admin, daily at 07:30 in the tenant's zone; with `overrides`."""
    job = Job(name="from-admin", cron="30 7 * * *", timezone="", task_name=TASK)
    return change_form(job, tenant=tenant.pk, **overrides)
