"""A job's life: create, pause, resume, trigger, delete, and bulk actions by tag."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F

from scheduler_app import schedules
from scheduler_app.dispatch import leftovers
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import AuditEvent, Job, JobRun, Tenant, Trigger, db_now
from scheduler_app.models.lifecycle import audit_job, record_skipped, skip_due_fires
from scheduler_app.services import chains, flexible
from scheduler_app.services.checkins import ensure_monitor
from scheduler_app.services.common import (
    admission_fields,
    admitted_manual,
    check_manual_runs_per_hour,
    refuse_monitored,
)
from scheduler_app.services.jobspec import JobSpec, check_job_quota, validate_spec
from scheduler_app.validation import InvalidInput, check_line, check_name


def first_fire(schedule: schedules.Schedule, now: datetime) -> datetime | None:
    """The first fire at or after `now` (a one-off in the recent past fires at once); None
    for a schedule with nothing to fire (a chained job's)."""
    if schedule.at is not None and schedule.at <= now:
        return schedule.at
    return schedules.next_fire_after(schedule, now - timedelta(microseconds=1))


def job_create(
    tenant: Tenant, spec: JobSpec, *, actor: str = "", allow_any_registered: bool = False, wake: bool = True
) -> Job:
    """Make a job of `spec` for `tenant`. allow_any_registered=True comes from the admin's job
    form only, for staff: the task may be any the Celery app registers (validate_spec).
    wake=False leaves the beats asleep: for a caller that records the job's only fire itself
    (services/taskcalls.py), so that nothing is left for a beat to do."""
    seed = secrets.randbelow(2**31)
    name = spec.name
    try:
        with transaction.atomic():
            if spec.flex_window:  # placed and saved under the scope's lock: no two on one minute
                flexible.lock_placements([tenant.id], [spec.queue or ""] if spec.flex_scope == "queue" else [])
            now = db_now()
            schedule, fields = validate_spec(
                tenant, spec, now, jitter_seed=seed, allow_any_registered=allow_any_registered
            )
            fields["jitter_seed"] = seed
            name = fields["name"]
            check_job_quota(tenant)
            job = Job.objects.create(tenant=tenant, next_run_at=first_fire(schedule, now), **fields)
            ensure_monitor(job)  # a monitored job's ping key
            chains.refresh_has_children([job.after_job_id])
            audit_job(
                job,
                "job.created",
                actor,
                schedule=chains.describe(job, schedule),
                task=job.task_name,
                **({"placement": job.flex_note} if job.flex_window else {}),
            )
            if wake:
                wake_beats()
    except IntegrityError:
        raise InvalidInput("name", f"tenant {tenant.slug!r} already has a job named {name!r}") from None
    return job


def job_resume(job: Job, *, actor: str = "") -> Job:
    """Start a paused job again from now. Fires missed while paused are recorded as one
    skipped run (at the first of them), not run."""
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
        # A job that paused itself (ledger.autopause) counts its failures in a row afresh.
        Job.objects.filter(id=job.id).update(
            enabled=True,
            paused_note="",
            next_run_at=next_run_at,
            version=job.version + 1,
            consecutive_failures=0,
            auto_paused_at=None,
        )
        audit_job(
            job,
            "job.resumed",
            actor,
            next_run_at=next_run_at.isoformat() if next_run_at else None,
            **({"auto_paused_at": job.auto_paused_at.isoformat()} if job.auto_paused_at else {}),
        )
        wake_beats()
    job.refresh_from_db()
    return job


def job_trigger(job: Job, *, actor: str = "") -> JobRun:
    """Record a manual run at the database's now and publish it after commit, or hold it as
    pending while the tenant is over its manual budget or dispatch quota (the beat queues it
    in turn: its state goes pending, then queued). A monitored job is refused (InvalidInput)."""
    refuse_monitored(job, "triggered")
    now = db_now()
    with transaction.atomic():
        check_manual_runs_per_hour(job.tenant_id, now, 1)
        go, reason = admitted_manual(job.tenant_id, now, 1)
        run = JobRun.objects.create(
            job=job,
            tenant_id=job.tenant_id,
            scheduled_at=now,
            trigger=Trigger.MANUAL,
            created_at=now,
            job_version=job.version,
            priority=job.priority,
            **admission_fields(go, reason, now),
        )
        audit_job(job, "job.triggered", actor, run_id=run.id, state=run.state)
        if go:
            message = RunMessage.of(run.id, 1, job)
            transaction.on_commit(lambda: publish_runs([message]))
    return run


def job_trigger_reporting(job: Job, *, actor: str = "") -> tuple[JobRun, Exception | None]:
    """job_trigger in a transaction of its own, for callers that tell a person what happened.

    Publishing happens at commit; when it fails the run is already recorded (the beat's
    sweep publishes it again), so the error comes back beside the run instead of raising.
    """
    run = None
    try:
        with transaction.atomic():
            run = job_trigger(job, actor=actor)
    except Exception as exc:  # publishing runs after commit: only then is the run already saved
        if run is None or not JobRun.objects.filter(id=run.id).exists():
            raise
        return run, exc
    return run, None


def job_delete(job: Job, *, actor: str = "") -> None:
    with transaction.atomic(), chains.refusing_orphans():
        audit_job(job, "job.deleted", actor)
        job.delete()
        leftovers.purge_after_commit([job.queue])
        chains.refresh_has_children([job.after_job_id])


BULK_ACTIONS = ("pause", "resume", "delete")


def jobs_bulk(tenant: Tenant, *, tag: str, action: str, note: str = "", actor: str = "") -> int:
    """Pause, resume or delete every job of `tenant` tagged `tag`; return how many changed."""
    tag, note = check_name("tag", tag, max_length=64), check_line("note", note)
    if action not in BULK_ACTIONS:
        raise InvalidInput("action", f"must be one of {', '.join(BULK_ACTIONS)}")
    ids = list(Job.objects.filter(tenant=tenant).tagged(tag).values_list("id", flat=True))
    if action == "resume":
        paused = list(Job.objects.filter(id__in=ids, enabled=False))
        return sum(1 for job in paused if job_resume(job, actor=actor).enabled)
    with transaction.atomic():
        targets = Job.objects.filter(id__in=ids)
        if action == "pause":
            targets = targets.filter(enabled=True)
        changed = list(targets.select_for_update().values_list("id", "name"))
        AuditEvent.objects.bulk_create(
            AuditEvent(
                tenant=tenant,
                job_id=None if action == "delete" else job_id,
                job_name=name,
                action=f"job.{'paused' if action == 'pause' else 'deleted'}",
                actor=actor,
                detail={"tag": tag, "note": note[:500]} if action == "pause" else {"tag": tag},
            )
            for job_id, name in changed
        )
        changed_ids = [job_id for job_id, _ in changed]
        if action == "pause":
            skip_due_fires(changed_ids)
            Job.objects.filter(id__in=changed_ids).update(
                enabled=False, paused_note=note[:500], version=F("version") + 1
            )
        else:
            parents = set(Job.objects.filter(id__in=changed_ids).values_list("after_job_id", flat=True))
            queues = set(Job.objects.filter(id__in=changed_ids).values_list("queue", flat=True))
            with chains.refusing_orphans():
                Job.objects.filter(id__in=changed_ids).delete()
            leftovers.purge_after_commit(queues)
            chains.refresh_has_children(parents)
    return len(changed)
