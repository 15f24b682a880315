"""Setting a tenant's or a job's retention (the policy is ledger/policy.py; the pruning that
enforces it ledger/retention.py), audited like every other change.

The tenant's retention (its own, else the settings') is the operator's bound: a job may keep
its runs for less, never for longer. A job's days and failed days may be at most the
tenant's (0, forever, only while the tenant keeps forever too), its keep-last at most the
tenant's; anything more is refused naming the field. When staff lower a tenant's retention,
its jobs' longer values come down to the new bound in the same transaction (audited).
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction

from scheduler_app.ledger.policy import FIELDS, SETTINGS, check_retention, own_fields, resolve
from scheduler_app.models import JOB_RETENTION_SET, AuditEvent, Job, Tenant, db_now
from scheduler_app.services.tenants import write_tenant_changes
from scheduler_app.validation import InvalidInput


def retention_bounds(tenant: Tenant, fields: Mapping | None = None) -> tuple[dict[str, int | None], dict[str, str]]:
    """The most each of a job's retention fields may be under `tenant` (None: no bound), and
    where each bound comes from ("tenant" or the setting's name). `fields`: the tenant's
    retention fields as they are about to be (default: as saved)."""
    policy, sources = resolve(("tenant", own_fields(tenant) if fields is None else fields))
    bounds = {
        "retention_days": policy.kept_days(failed=False),
        "retention_failed_days": policy.kept_days(failed=True),
        "retention_keep_last": policy.keep_last,
    }
    return bounds, {name: SETTINGS[name] if source == "settings" else "tenant" for name, source in sources.items()}


def over_bound(value: int | None, bound: int | None, *, days: bool) -> bool:
    """Whether a job's own `value` keeps more than `bound` allows (0 days: forever)."""
    if value is None or bound is None:
        return False
    return (value == 0 or value > bound) if days else value > bound


def check_job_retention(job: Job, changes: Mapping) -> dict[str, int | None]:
    """check_retention, then the tenant's bound on what the job keeps after the change."""
    values = check_retention(job, changes)
    after = {**own_fields(job), **values}
    bounds, sources = retention_bounds(job.tenant)
    for name in FIELDS:  # days first: a job's days bound what its failed runs keep too
        bound = bounds[name]
        if over_bound(after[name], bound, days=name != "retention_keep_last"):
            assert bound is not None  # over_bound is False without one
            raise InvalidInput(name, bound_message(name, job.tenant, bound, sources[name]))
    return values


def bound_message(name: str, tenant: Tenant, bound: int, source: str) -> str:
    where = f"tenant {tenant.slug!r}'s retention" if source == "tenant" else f"the deployment's {source}"
    if name == "retention_keep_last":
        return f"must be at most {bound} ({where}, which staff set): a job keeps no more runs than its tenant"
    return (
        f"must be between 1 and {bound} days ({where}, which staff set): a job keeps its runs no longer than "
        "its tenant, and 0 (forever) is refused"
    )


def tenant_set_retention(tenant: Tenant, changes: Mapping, *, actor: str = "") -> Tenant:
    """Set (or, with None, clear) a tenant's retention fields; audited as tenant.updated.
    Its jobs' own values above the new bound are lowered to it. The beats' pruning takes it
    up within CRONFLEET_RETENTION_CHECK_SECONDS."""
    values = check_retention(tenant, changes)
    with transaction.atomic():
        tenant = write_tenant_changes(tenant, values, actor=actor)
        clamp_jobs(tenant, actor=actor)
    return tenant


def clamp_all_jobs(*, actor: str = "") -> int:
    """clamp_jobs for every tenant whose jobs set their own retention, each in a transaction
    of its own: for a ledger whose jobs were given values above their tenant's before the
    bound existed (`manage.py retention clamp`, once after upgrading); how many jobs changed."""
    changed = 0
    tenant_ids = Job.objects.filter(JOB_RETENTION_SET).values_list("tenant_id", flat=True).distinct()
    for tenant in Tenant.objects.filter(id__in=list(tenant_ids)).order_by("id"):
        with transaction.atomic():
            changed += clamp_jobs(tenant, actor=actor)
    return changed


def clamp_jobs(tenant: Tenant, *, actor: str = "") -> int:
    """Lower the tenant's jobs' retention values that exceed its bound to the bound; return
    how many jobs changed. Call inside the transaction that set the tenant's."""
    bounds, _ = retention_bounds(tenant)
    changed = 0
    for job in Job.objects.filter(JOB_RETENTION_SET, tenant=tenant).select_for_update(no_key=True).order_by("id"):
        values = {
            name: bounds[name]
            for name in FIELDS
            if over_bound(getattr(job, name), bounds[name], days=name != "retention_keep_last")
        }
        days = values.get("retention_days", job.retention_days)
        failed = values.get("retention_failed_days", job.retention_failed_days)
        if days and failed and failed < days:  # keep the job's own pair valid (check_retention's rule)
            values["retention_failed_days"] = days
        if values:
            write_job_retention(job, values, actor=actor, reason="the tenant's retention was lowered")
            changed += 1
    return changed


def job_set_retention(job: Job, changes: Mapping, *, actor: str = "") -> Job:
    """Set (or, with None, clear) a job's retention fields within its tenant's bound;
    audited as job.updated. The job's version stays: retention changes nothing about how
    its fires run."""
    return write_job_retention(job, check_job_retention(job, changes), actor=actor)


def write_job_retention(job: Job, values: Mapping, *, actor: str = "", reason: str = "") -> Job:
    diff = {name: [getattr(job, name), value] for name, value in values.items() if getattr(job, name) != value}
    if diff:
        detail = {"changes": diff, **({"reason": reason} if reason else {})}
        with transaction.atomic():
            Job.objects.filter(id=job.id).update(updated_at=db_now(), **values)
            AuditEvent.objects.create(
                tenant_id=job.tenant_id, job=job, job_name=job.name, action="job.updated", actor=actor, detail=detail
            )
        job.refresh_from_db()
    return job
