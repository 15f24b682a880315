"""The name Celery shows for a run's message: `tenant/job` (its `shadow` header), so Flower,
`celery inspect` and the worker's log say whose run each execute_run message carries.

A message names its job (RunMessage.name) and tenant id; the tenant's slug comes from a
per-process cache filled by one query for the tenants not seen before (a slug never changes
once the tenant exists), so naming costs a dictionary lookup per message.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler_app.models import Tenant

_slugs: dict[int, str] = {}


def learn_tenants(tenant_ids: Iterable[int]) -> None:
    """Cache the slugs of the tenants in `tenant_ids` not known yet (one query for them)."""
    unknown = {tenant_id for tenant_id in tenant_ids if tenant_id and tenant_id not in _slugs}
    if unknown:
        _slugs.update(Tenant.objects.filter(id__in=unknown).values_list("id", "slug"))


def shadow_name(tenant_id: int, job_name: str) -> str:
    """'tenant/job'; '' when the message does not say (Celery then shows the task's name)."""
    slug = _slugs.get(tenant_id)
    return f"{slug}/{job_name}" if slug and job_name else ""
