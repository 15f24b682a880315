"""One call of a task as a one-off job: what Cronfleet's `django.tasks` backend records for
each enqueue() (scheduler_app/djangotasks/).

The call is a job of its own (its args and kwargs, a schedule of one instant), made by
job_create. A call due now has its fire recorded at once, in the caller's transaction, as the
beat would record it (a scheduled run at the job's instant, the job left with nothing more to
fire), and published after commit as a trigger's run is; a later instant (run_after) is the
beats' to fire like any one-off job's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django.db import transaction

from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import Job, JobRun, Tenant, Trigger, db_now
from scheduler_app.services.common import admission_fields, admitted
from scheduler_app.services.jobs import job_create
from scheduler_app.services.jobspec import JobSpec


def task_call_record(
    tenant: Tenant, spec: JobSpec, *, run_after: datetime | None = None, actor: str = ""
) -> tuple[Job, JobRun | None]:
    """Make the one-off job of a call (spec without a schedule) firing at `run_after`, or now
    when that is None or past; return it with its run when due now (None: deferred)."""
    with transaction.atomic():
        now = db_now()
        deferred = run_after is not None and run_after > now
        job = job_create(tenant, replace(spec, at=run_after if deferred else now), actor=actor, wake=deferred)
        if deferred:
            return job, None
        go, reason = admitted(tenant.id, now, 1)
        run = JobRun.objects.create(
            job=job,
            tenant_id=tenant.id,
            scheduled_at=job.run_at,
            trigger=Trigger.SCHEDULE,
            created_at=now,
            job_version=job.version,
            priority=job.priority,
            **admission_fields(go, reason, now),
        )
        # Its one fire is recorded: nothing is left for a beat to fire.
        Job.objects.filter(id=job.id).update(next_run_at=None)
        job.next_run_at = None
        if go:
            message = RunMessage.of(run.id, 1, job)
            transaction.on_commit(lambda: publish_runs([message]))
    return job, run
