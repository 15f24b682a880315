"""Setting a tenant's or a job's retention (the policy is ledger/policy.py; the pruning that
enforces it ledger/retention.py), audited like every other change."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction

from scheduler_app.ledger.policy import check_retention
from scheduler_app.models import AuditEvent, Job, Tenant, db_now
from scheduler_app.services.tenants import write_tenant_changes


def tenant_set_retention(tenant: Tenant, changes: Mapping, *, actor: str = "") -> Tenant:
    """Set (or, with None, clear) a tenant's retention fields; audited as tenant.updated.
    The beats' pruning takes it up within CRONFLEET_RETENTION_CHECK_SECONDS."""
    return write_tenant_changes(tenant, check_retention(tenant, changes), actor=actor)


def job_set_retention(job: Job, changes: Mapping, *, actor: str = "") -> Job:
    """Set (or, with None, clear) a job's retention fields; audited as job.updated. The
    job's version stays: retention changes nothing about how its fires run."""
    values = check_retention(job, changes)
    diff = {name: [getattr(job, name), value] for name, value in values.items() if getattr(job, name) != value}
    if diff:
        with transaction.atomic():
            Job.objects.filter(id=job.id).update(updated_at=db_now(), **values)
            AuditEvent.objects.create(tenant_id=job.tenant_id, job=job, job_name=job.name, action="job.updated",
                                      actor=actor, detail={"changes": diff})
        job.refresh_from_db()
    return job
