"""Writes of runs outside the beat: backfilling past fires, replaying a failed or dead run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import transaction

from scheduler_app import schedules
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Trigger, db_now
from scheduler_app.models.lifecycle import audit_job
from scheduler_app.services.common import (
    admission_fields,
    admitted,
    admitted_manual,
    check_manual_runs_per_hour,
    refuse_monitored,
)
from scheduler_app.validation import InvalidInput

MAX_BACKFILL = 1000


EARLIEST_BACKFILL = datetime(1970, 1, 1, tzinfo=UTC)


def job_backfill(job: Job, *, start: datetime, end: datetime, dry_run: bool, actor: str = "") -> dict:
    """Record runs for the job's fire times in [start, end] that have none yet, and publish
    those within the tenant's manual budget (the rest wait as pending and the beat releases
    them as the tenant's manual runs finish); with dry_run, only say which. The range must
    lie in the past. A monitored job is refused (InvalidInput naming `target`)."""
    refuse_monitored(job, "backfilled")
    now = db_now()
    for field, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise InvalidInput(field, "must be an instant with a UTC offset")
    if start < EARLIEST_BACKFILL:
        raise InvalidInput("start", f"must not be before {EARLIEST_BACKFILL.year}")
    if end <= start:
        raise InvalidInput("end", "must be after start")
    if end > now:
        raise InvalidInput("end", "must not be in the future (backfill fills the past)")
    fires: list[datetime] = []
    cursor = start - timedelta(microseconds=1)
    while (at := schedules.next_fire_after(job.schedule, cursor)) is not None and at <= end:
        if len(fires) == MAX_BACKFILL:
            raise InvalidInput("end", f"the range holds more than {MAX_BACKFILL} fires; backfill a shorter one")
        fires.append(at)
        cursor = at
    with transaction.atomic():
        # The job's row lock keeps beats (which skip locked jobs) from recording these fires meanwhile.
        locked = Job.objects.select_for_update().get(id=job.id)
        existing = set(JobRun.objects.filter(job=job, scheduled_at__in=fires).values_list("scheduled_at", flat=True))
        missing = [at for at in fires if at not in existing]
        created, held = [], 0
        if not dry_run and missing:
            check_manual_runs_per_hour(job.tenant_id, now, len(missing))
            go, reason = admitted_manual(job.tenant_id, now, len(missing))
            created = JobRun.objects.bulk_create(
                JobRun(
                    job=job,
                    tenant_id=job.tenant_id,
                    scheduled_at=at,
                    trigger=Trigger.BACKFILL,
                    created_at=now,
                    job_version=locked.version,
                    priority=locked.priority,
                    **admission_fields(index < go, reason, now),
                )
                for index, at in enumerate(missing)
            )
            held = len(created) - go
            audit_job(
                job,
                "job.backfilled",
                actor,
                start=start.isoformat(),
                end=end.isoformat(),
                created=len(created),
                held=held,
            )
            messages = [RunMessage.of(run.id, 1, locked) for run in created[:go]]
            transaction.on_commit(lambda: publish_runs(messages))
    return {
        "fires": fires,
        "missing": missing,
        "created": len(created),
        "held": held,
        "existing": len(existing),
        "dry_run": dry_run,
    }


REPLAYABLE = (RunState.FAILED, RunState.DEAD)


def run_replay(run: JobRun, *, actor: str = "") -> JobRun:
    """Queue a failed or dead run again as its next attempt (same fire, same fire key).

    The outcome it replaces stays in the audit trail. A monitored job's run is refused
    (InvalidInput naming `target`): it runs elsewhere.
    """
    now = db_now()
    with transaction.atomic():
        locked = JobRun.objects.select_for_update().select_related("job").get(id=run.id)
        refuse_monitored(locked.job, "replayed")
        if locked.state not in REPLAYABLE:
            raise InvalidInput("state", f"only failed or dead runs can be replayed; this one is {locked.state}")
        check_manual_runs_per_hour(locked.tenant_id, now, 1)
        attempt = locked.attempt + 1
        go, reason = admitted(locked.tenant_id, now, 1)
        JobRun.objects.filter(id=run.id).update(
            started_at=None,
            finished_at=None,
            heartbeat_at=None,
            lease_expires_at=None,
            next_attempt_at=None,
            worker="",
            celery_task_id="",
            result="",
            error="",
            attempt=attempt,
            **{"reason": f"replayed by {actor or 'someone'}", **admission_fields(go, reason, now)},
        )
        AuditEvent.objects.create(
            tenant_id=locked.tenant_id,
            job_id=locked.job_id,
            job_name=locked.job.name,
            run_id=run.id,
            action="run.replayed",
            actor=actor,
            detail={"attempt": attempt, "was": locked.state, "error": locked.error[:2000]},
        )
        if go:
            message = RunMessage.of(run.id, attempt, locked.job)
            transaction.on_commit(lambda: publish_runs([message]))
    run.refresh_from_db()
    return run
