"""Writes to a job's life that more than one floor makes: pausing a job (the services, and
the worker when a target answers that it is gone), resuming one (the services, and the
beats when a pause that said "resume" ran out), the skipped run of a fire, the audit
row of a job's change, and the NOTIFY that wakes sleeping beats (the services, and a run's
end that starts a chained run)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F

from scheduler_app import schedules
from scheduler_app.models.core import AuditEvent, Job, JobRun, RunState, db_now
from scheduler_app.validation import InvalidInput, check_line

WAKE_CHANNEL = "cronfleet_jobs"  # beats LISTEN here (dispatch/waker.py)


def wake_beats() -> None:
    """Tell sleeping beats (LISTEN cronfleet_jobs) that a job changed; delivered at commit."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {WAKE_CHANNEL}")


def job_pause(job: Job, *, note: str = "", actor: str = "", until: datetime | None = None, on_expiry: str = "") -> Job:
    """Stop a job firing. next_run_at is kept so resume can record what was missed.

    Who (`actor`), why (`note`), when, and until when (`until`, then `on_expiry`: resume or
    alert, alert by default) are kept on the job until it is resumed. A paused job given an
    `until` gets that new end (audited as job.pause_extended); without one, nothing changes.

    The job row is locked first, so a beat that has claimed the job finishes its turn (the
    fire gets its run) before the pause; a fire already due that no beat has claimed yet is
    recorded as skipped ("paused"), so no fire due before the pause is left without a row.
    A one-off keeps its fire for resume.
    """
    note = check_line("note", note)
    with transaction.atomic():
        fields = pause_fields(note=note, actor=actor, now=db_now(), until=until, on_expiry=on_expiry)
        locked = Job.objects.select_for_update(no_key=True).filter(id=job.id).values("enabled", "paused_note").first()
        if locked is not None and locked["enabled"]:
            skip_due_fires([job.id])
            Job.objects.filter(id=job.id).update(**fields, version=F("version") + 1)
            audit_job(job, "job.paused", actor, **pause_detail(fields))
        elif locked is not None and until is not None:
            # Paused already: a new end (and what then, who said so, why if given); the pause
            # keeps its start, so its age stays the truth.
            kept = {"paused_note": note[:500] if note else locked["paused_note"]}
            changes = {name: fields[name] for name in ("paused_by", "paused_until", "pause_expiry", "pause_alerted_at")}
            Job.objects.filter(id=job.id).update(**changes, **kept)
            audit_job(job, "job.pause_extended", actor, **pause_detail({**fields, **kept}))
    job.refresh_from_db()
    return job


def pause_fields(*, note: str, actor: str, now: datetime, until: datetime | None, on_expiry: str) -> dict:
    """The job columns a pause sets; InvalidInput naming the field when its end makes no sense."""
    problem = schedules.pause_problem(until, on_expiry, now)
    if problem is not None:
        raise InvalidInput(*problem)
    return dict(
        enabled=False,
        paused_note=note[:500],
        paused_by=actor[:200],
        paused_at=now,
        paused_until=until,
        pause_expiry=(on_expiry or schedules.DEFAULT_EXPIRY) if until is not None else "",
        pause_alerted_at=None,
    )


def pause_detail(fields: dict) -> dict:
    """A pause's audit detail: the note, and its end when it has one."""
    detail: dict = {"note": fields["paused_note"]}
    if fields["paused_until"] is not None:
        detail.update(until=fields["paused_until"].isoformat(), on_expiry=fields["pause_expiry"])
    return detail


# What a resume clears: the pause's who, why and end, and a pause after repeated failure
# (ledger.autopause), whose count of failures in a row starts again.
RESUMED = dict(
    enabled=True,
    paused_note="",
    paused_by="",
    paused_at=None,
    paused_until=None,
    pause_expiry="",
    pause_alerted_at=None,
    consecutive_failures=0,
    auto_paused_at=None,
)


def first_fire(schedule: schedules.Schedule, now: datetime) -> datetime | None:
    """The first fire at or after `now` (a one-off in the recent past fires at once); None
    for a schedule with nothing to fire (a chained job's)."""
    if schedule.at is not None and schedule.at <= now:
        return schedule.at
    return schedules.next_fire_after(schedule, now - timedelta(microseconds=1))


def job_resume(job: Job, *, actor: str = "", **detail) -> Job:
    """Start a paused job again from now. Fires missed while paused are recorded as one
    skipped run (at the first of them), not run. `detail`: more for the audit row."""
    now = db_now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job.id)
        if job.enabled:
            return job
        missed_from = job.next_run_at
        next_run_at = first_fire(job.schedule, now) if job.schedule.at is None else job.next_run_at
        if missed_from is not None and missed_from < now and job.schedule.at is None:
            record_skipped(
                job, missed_from, now, f"paused: missed fires from {missed_from.isoformat()} until {now.isoformat()}"
            )
            next_run_at = schedules.next_fire_after(job.schedule, now - timedelta(microseconds=1))
        Job.objects.filter(id=job.id).update(**RESUMED, next_run_at=next_run_at, version=job.version + 1)
        was = {"auto_paused_at": job.auto_paused_at.isoformat() if job.auto_paused_at else None}
        was["paused_by"] = job.paused_by or None
        audit_job(
            job,
            "job.resumed",
            actor,
            next_run_at=next_run_at.isoformat() if next_run_at else None,
            **{key: value for key, value in {**was, **detail}.items() if value is not None},
        )
        wake_beats()
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
