"""A job's life: create, pause, resume, trigger, delete, and bulk actions by tag."""

from __future__ import annotations

import secrets
from datetime import datetime

from django.db import IntegrityError, transaction

from scheduler_app.dispatch import leftovers
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import JOB_NAME_UNIQUE, AuditEvent, Job, JobRun, Tenant, Trigger, db_now
from scheduler_app.models.lifecycle import audit_job, first_fire, job_resume
from scheduler_app.services import chains, flexible, pauses
from scheduler_app.services.checkins import ensure_monitor
from scheduler_app.services.common import (
    admission_fields,
    admitted_manual,
    check_manual_runs_per_hour,
    refuse_monitored,
    violates,
)
from scheduler_app.services.jobspec import JobSpec, check_job_quota, validate_spec
from scheduler_app.validation import InvalidInput, check_line, check_name


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
    except IntegrityError as exc:
        if not violates(exc, Job, JOB_NAME_UNIQUE):
            raise
        raise InvalidInput("name", f"tenant {tenant.slug!r} already has a job named {name!r}") from None
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


def jobs_bulk(
    tenant: Tenant,
    *,
    tag: str,
    action: str,
    note: str = "",
    actor: str = "",
    until: datetime | None = None,
    on_expiry: str = "",
) -> pauses.BulkPause:
    """Pause, resume or delete every job of `tenant` tagged `tag`. A pause of more jobs than
    CRONFLEET_BULK_PAUSE_APPROVAL_OVER waits for a second person (services/pauses.py):
    the answer's `request` is then set and nothing is paused yet."""
    tag, note = check_name("tag", tag, max_length=64), check_line("note", note)
    if action not in BULK_ACTIONS:
        raise InvalidInput("action", f"must be one of {', '.join(BULK_ACTIONS)}")
    if action == "pause":
        return pauses.pause_bulk(
            tenant, scope=pauses.scope_of(tag=tag), note=note, actor=actor, until=until, on_expiry=on_expiry
        )
    ids = list(Job.objects.filter(tenant=tenant).tagged(tag).values_list("id", flat=True))
    if action == "resume":
        paused = list(Job.objects.filter(id__in=ids, enabled=False))
        return pauses.BulkPause(sum(1 for job in paused if job_resume(job, actor=actor).enabled))
    with transaction.atomic():
        changed = list(Job.objects.filter(id__in=ids).select_for_update().values_list("id", "name"))
        AuditEvent.objects.bulk_create(
            AuditEvent(
                tenant=tenant, job_id=None, job_name=name, action="job.deleted", actor=actor, detail={"tag": tag}
            )
            for _, name in changed
        )
        changed_ids = [job_id for job_id, _ in changed]
        parents = set(Job.objects.filter(id__in=changed_ids).values_list("after_job_id", flat=True))
        queues = set(Job.objects.filter(id__in=changed_ids).values_list("queue", flat=True))
        with chains.refusing_orphans():
            Job.objects.filter(id__in=changed_ids).delete()
        leftovers.purge_after_commit(queues)
        chains.refresh_has_children(parents)
    return pauses.BulkPause(len(changed))
