"""Spent django.tasks calls: each enqueue() makes a one-off job of its own
(services/taskcalls.py); once retention has pruned that job's run, nothing is left to read
(get_result then answers that the result does not exist), and the job and the audit of its
creation would otherwise stay forever, one row each a call. The retention pass deletes them
with its audit batch (retention.Pruner.prune_audit), a bounded batch at a time.

A call's job is spent when it carries taskapi.CALL_TAG and a task_name under taskapi.PREFIX,
is a one-off (run_at) with nothing left to fire (next_run_at NULL), is not declared by code
(managed_by empty: a periodic declaration is never a call), and has no run left. The jobs are
locked FOR UPDATE (SKIP LOCKED: one a trigger or an edit holds is passed over) before anything
is deleted; a run can only be recorded for a job under a key-share lock on its row (the foreign
key), so none appears while they are held."""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from scheduler_app import taskapi
from scheduler_app.models import AuditEvent, Job, JobRun


def spent_calls(tenant_id: int | None = None):
    """The spent calls' jobs (see the module's docstring), of one tenant or all, oldest first."""
    runs = JobRun.objects.filter(job_id=OuterRef("pk"))
    jobs = (
        Job.objects.tagged(taskapi.CALL_TAG)
        .filter(task_name__startswith=taskapi.PREFIX, run_at__isnull=False, next_run_at__isnull=True, managed_by="")
        .exclude(Exists(runs))
        .order_by("id")
    )
    return jobs if tenant_id is None else jobs.filter(tenant_id=tenant_id)


def prune_spent_calls(limit: int, *, tenant_id: int | None = None, dry_run: bool = False) -> int:
    """Delete up to `limit` spent calls' jobs and their audit events (count them all, in a dry
    run); return how many jobs."""
    if dry_run:
        return spent_calls(tenant_id).count()
    with transaction.atomic():
        jobs = spent_calls(tenant_id)
        if connection.features.has_select_for_update_skip_locked:
            jobs = jobs.select_for_update(skip_locked=True, of=("self",))
        ids = list(jobs.values_list("id", flat=True)[:limit])
        if not ids:
            return 0
        AuditEvent.objects.filter(job_id__in=ids).delete()
        deleted = Job.objects.filter(id__in=ids).delete()[1].get(Job._meta.label, 0)
    return deleted
