"""Writes to a job's life that more than one floor makes: pausing a job (the services, and
the worker when a target answers that it is gone), the skipped run of a fire, the audit
row of a job's change, and the NOTIFY that wakes sleeping beats (the services, and a run's
end that starts a chained run)."""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.db.models import F

from scheduler_app.models.core import AuditEvent, Job, JobRun, RunState, db_now
from scheduler_app.validation import check_line

WAKE_CHANNEL = "cronfleet_jobs"  # beats LISTEN here (dispatch/waker.py)


def wake_beats() -> None:
    """Tell sleeping beats (LISTEN cronfleet_jobs) that a job changed; delivered at commit."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {WAKE_CHANNEL}")


def job_pause(job: Job, *, note: str = "", actor: str = "") -> Job:
    """Stop a job firing. next_run_at is kept so resume can record what was missed.

    The job row is locked first, so a beat that has claimed the job finishes its turn (the
    fire gets its run) before the pause; a fire already due that no beat has claimed yet is
    recorded as skipped ("paused"), so no fire due before the pause is left without a row.
    A one-off keeps its fire for resume.
    """
    note = check_line("note", note)
    with transaction.atomic():
        if Job.objects.select_for_update(no_key=True).filter(id=job.id, enabled=True).exists():
            skip_due_fires([job.id])
            Job.objects.filter(id=job.id).update(enabled=False, paused_note=note[:500], version=F("version") + 1)
            audit_job(job, "job.paused", actor, note=note[:500])
    job.refresh_from_db()
    return job


def skip_due_fires(job_ids: list[int]) -> None:
    """Record the due, unclaimed fire of each of these (locked) jobs as skipped ("paused")."""
    now = db_now()
    for due in Job.objects.filter(id__in=job_ids, next_run_at__lte=now, run_at__isnull=True):
        record_skipped(
            due, due.next_run_at, now, f"paused: due at {due.next_run_at.isoformat()}, paused at {now.isoformat()}"
        )


def record_skipped(job: Job, scheduled_at: datetime, now: datetime, reason: str) -> None:
    """A skipped run for the fire at `scheduled_at`, unless that fire has a run already."""
    JobRun.objects.get_or_create(
        job=job,
        scheduled_at=scheduled_at,
        defaults=dict(
            tenant_id=job.tenant_id,
            state=RunState.SKIPPED,
            created_at=now,
            finished_at=now,
            job_version=job.version,
            reason=reason,
        ),
    )


def audit_job(job: Job, action: str, actor: str, **detail) -> None:
    AuditEvent.objects.create(
        tenant_id=job.tenant_id, job=job, job_name=job.name, action=action, actor=actor, detail=detail
    )
