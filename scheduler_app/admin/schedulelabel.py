"""The job list's "schedule" column in words: a chained job by its parent ("after extract
succeeds", never "once at -"), a flexible one by its window, any other by its schedule."""

from __future__ import annotations

from scheduler_app.management.tables import describe_schedule
from scheduler_app.models import Job
from scheduler_app.services.chains import after_text


def schedule_label(job: Job) -> str:
    if job.after_job_id is not None:  # reads the parent's name: list_select_related avoids a query a row
        return after_text(job.after_job.name, job.after_states)
    placed = describe_schedule(job.cron, job.timezone, job.every_seconds, job.run_at)
    return f"window {job.flex_window}, placed at {placed}" if job.flex_window else placed
