"""Tenants: creation, changes to their name, zone, quotas and weight, and their webhook
signing secrets."""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils.text import slugify

from scheduler_app import schedules
from scheduler_app.http import secrets as crypto
from scheduler_app.http import signing as webhooks
from scheduler_app.models import AuditEvent, Tenant, db_now
from scheduler_app.services.common import check_int
from scheduler_app.validation import InvalidInput, check_name


def check_slug(slug) -> str:
    if not isinstance(slug, str) or not slug or slugify(slug) != slug or len(slug) > 64:
        raise InvalidInput("slug", "use 1-64 lowercase letters, digits, hyphens or underscores")
    return slug


def check_timezone(timezone) -> str:
    try:
        schedules.zone(timezone)
    except schedules.InvalidSchedule as exc:
        raise InvalidInput("timezone", exc.message) from None
    return timezone


def tenant_create(*, slug: str, name: str = "", timezone: str = "UTC", actor: str = "") -> Tenant:
    check_slug(slug)
    check_timezone(timezone)
    name = check_name("name", name or slug)
    try:
        with transaction.atomic():
            return Tenant.objects.create(
                slug=slug, name=name, timezone=timezone, webhook_secret_encrypted=crypto.encrypt(webhooks.new_secret())
            )
    except IntegrityError:
        # The slug taken is the one rule a caller can mend; any other broken rule is a fault
        # of ours, raised as it is rather than reported as a name taken.
        if not Tenant.objects.filter(slug=slug).exists():
            raise
        raise InvalidInput("slug", f"tenant {slug!r} already exists") from None


def tenant_by_slug(slug: str, *, field: str = "tenant") -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise InvalidInput(field, f"no tenant {slug!r}")
    return tenant


def tenant_rotate_webhook_secret(tenant: Tenant, *, overlap: timedelta = timedelta(hours=24), actor: str = "") -> str:
    """Give the tenant a new signing secret and return it (shown once). The old one keeps
    signing beside it for `overlap`, so receivers can switch without dropping deliveries."""
    secret = webhooks.new_secret()
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(id=tenant.id)
        locked.webhook_secret_previous_encrypted = locked.webhook_secret_encrypted
        locked.webhook_secret_previous_until = db_now() + overlap if locked.webhook_secret_encrypted else None
        locked.webhook_secret_encrypted = crypto.encrypt(secret)
        locked.save(
            update_fields=[
                "webhook_secret_encrypted",
                "webhook_secret_previous_encrypted",
                "webhook_secret_previous_until",
            ]
        )
        AuditEvent.objects.create(
            tenant=tenant,
            action="tenant.secret_rotated",
            actor=actor,
            detail={"overlap_seconds": int(overlap.total_seconds())},
        )
    tenant.refresh_from_db()
    return secret


# field: (lowest, highest). None is allowed for all but weight and min_interval_seconds: no
# limit, or for max_jobs, api_requests_per_minute and manual_runs_per_hour the setting's default.
TENANT_LIMITS = {
    "max_jobs": (0, 10_000_000),
    "min_interval_seconds": (0, 366 * 86400),
    "max_fires_per_minute": (0, 10_000_000),
    "max_concurrent_runs": (0, 10_000_000),
    "weight": (1, 1000),
    "api_requests_per_minute": (1, 10_000_000),
    "manual_runs_per_hour": (0, 10_000_000),  # 0: unbounded
}


def tenant_update(tenant: Tenant, changes: dict, *, actor: str = "") -> Tenant:
    """Change a tenant's name, zone, active flag, quotas or weight. Quotas apply from the
    next write or dispatch; jobs already saved are not re-checked."""
    values: dict[str, object] = {}
    for key, value in changes.items():
        if key == "name":
            values[key] = check_name("name", value)
        elif key == "timezone":
            values[key] = check_timezone(value)
        elif key == "is_active":
            if not isinstance(value, bool):
                raise InvalidInput(key, "must be true or false")
            values[key] = value
        elif key in TENANT_LIMITS:
            values[key] = check_tenant_limit(key, value)
        else:
            raise InvalidInput(key, "is not a tenant field that can be changed")
    return write_tenant_changes(tenant, values, actor=actor)


def check_tenant_limit(key: str, value) -> int | None:
    """A quota or the weight within TENANT_LIMITS; None (no limit, or the setting's default)
    for all but weight and min_interval_seconds."""
    nullable = key not in ("weight", "min_interval_seconds")
    return None if value is None and nullable else check_int(key, value, *TENANT_LIMITS[key])


def write_tenant_changes(tenant: Tenant, values: dict, *, actor: str = "") -> Tenant:
    """Save checked `values` on the tenant with one audit row of what changed (if anything)."""
    diff = {key: [getattr(tenant, key), value] for key, value in values.items() if getattr(tenant, key) != value}
    if diff:
        with transaction.atomic():
            Tenant.objects.filter(id=tenant.id).update(**values)
            AuditEvent.objects.create(tenant=tenant, action="tenant.updated", actor=actor, detail={"changes": diff})
        tenant.refresh_from_db()
    return tenant
