"""The scope of a declaration (docs/schedules-as-code.md): each owner acts in the tenants its
declarations name, as (owner, tenant) pairs. Which jobs a plan may touch there, the warning for
an owner's jobs elsewhere, and the tenants' max_jobs checked before anything is planned."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from operator import or_
from typing import Any, Protocol

from django.db.models import Count, Q, QuerySet

from scheduler_app.models import Job, Tenant


class DeclaredJob(Protocol):
    """What this module reads of a declared job (declared.Declared, which imports this module)."""

    tenant: str
    source: str
    spec: Any


def managed_in(scope) -> QuerySet[Job]:
    """The jobs managed by each (owner, tenant) of `scope`: an owner's jobs in other tenants
    are not among them (two teams both called `ops` in two tenants never meet here)."""
    by_tenant: dict[str, set[str]] = {}
    for owner, tenant in scope:
        by_tenant.setdefault(tenant, set()).add(owner)
    if not by_tenant:
        return Job.objects.none()
    return Job.objects.filter(
        reduce(or_, (Q(tenant__slug=tenant, managed_by__in=owners) for tenant, owners in by_tenant.items()))
    )


def quota_problems(declared: Sequence[DeclaredJob], tenants: dict[str, Tenant], deletes: list[Job]) -> list[str]:
    """A line for each tenant the plan would leave with more jobs than its max_jobs (its jobs
    now, plus the declared names it does not have yet, less the jobs the plan deletes): the
    apply would fail there, after all its work. A plan creating nothing there is let be."""
    problems = []
    for slug, tenant in sorted(tenants.items()):
        mine = [item for item in declared if item.tenant == slug]
        if tenant.max_jobs is None or not mine:
            continue
        names = sorted({item.spec.name for item in mine})
        existing = sum(
            Job.objects.filter(tenant=tenant, name__in=names[start : start + 5000]).count()
            for start in range(0, len(names), 5000)
        )
        creates = len(names) - existing
        if not creates:
            continue
        now = Job.objects.filter(tenant=tenant).count()
        removed = sum(1 for job in deletes if job.tenant_id == tenant.id)
        after = now + creates - removed
        if after > tenant.max_jobs:
            problems.append(
                f"{mine[0].source}: tenant {slug}: max_jobs: applying would leave {after} jobs ({now} now, "
                f"{creates} to create, {removed} to delete), more than its quota of {tenant.max_jobs} jobs (max_jobs)"
            )
    return problems


def outside_scope(owners: list[str], scope) -> list[str]:
    """A warning for each owner that also manages jobs in tenants out of the scope (the same
    name used by another team, or a tenant this declaration does not name): left alone."""
    rows = (
        Job.objects.filter(managed_by__in=owners)
        .values_list("managed_by", "tenant__slug")
        .annotate(count=Count("id"))
        .order_by("managed_by", "tenant__slug")
    )
    found: dict[str, list[tuple[str, int]]] = {}
    for owner, tenant, count in rows:
        if (owner, tenant) not in scope:
            found.setdefault(owner, []).append((tenant, count))
    warnings = []
    for owner, where in found.items():
        total = sum(count for _, count in where)
        warnings.append(
            f"owner {owner!r} also owns {total} job{'s' if total != 1 else ''} in tenant(s) "
            f"{', '.join(tenant for tenant, _ in where)}, not touched"
        )
    return warnings
