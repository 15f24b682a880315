"""API keys: created (the secret shown once), revoked, authenticated by prefix and hash."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from django.db import transaction
from django.db.models.functions import Now
from django.utils.timezone import now as node_now

from scheduler_app.cells import CELL_NAME
from scheduler_app.conf import app_settings
from scheduler_app.models import ApiKey, AuditEvent, Tenant, db_now
from scheduler_app.services.common import QuotaExceeded
from scheduler_app.validation import InvalidInput, check_name

# cf_<prefix>_<secret>, or cf_<cell>_<prefix>_<secret> from a named cell (CRONFLEET_CELL). The
# secret's length tells the two apart; deploy/nginx/cells.conf reads the cell with this pattern.
API_KEY_PATTERN = re.compile(rf"cf_(?:({CELL_NAME})_)?([0-9a-f]{{12}})_([A-Za-z0-9_-]{{32}})")


# last_used_at is written at most this often per key, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _key_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def check_key_quota(tenant: Tenant) -> None:
    """Refuse a new key for a tenant already holding CRONFLEET_MAX_API_KEYS_PER_TENANT
    unrevoked keys. Locks the tenant row, so concurrent creations are counted one at a time,
    until the caller's transaction ends (or a short one of its own)."""
    with transaction.atomic():
        Tenant.objects.select_for_update().filter(id=tenant.id).first()
        active = ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).count()
    check_key_count(tenant, active)


def check_key_count(tenant: Tenant, active: int) -> None:
    """Refuse one more unrevoked key for a tenant holding `active` of them already."""
    limit = app_settings.MAX_API_KEYS_PER_TENANT
    if active >= limit:
        raise QuotaExceeded(
            "tenant",
            f"tenant {tenant.slug!r} already has the most unrevoked API keys allowed "
            f"({limit}, CRONFLEET_MAX_API_KEYS_PER_TENANT); revoke one first",
        )


KEY_PREFIX = re.compile(r"[0-9a-f]{12}")
KEY_HASH = re.compile(r"[0-9a-f]{64}")


def check_key_record(key: ApiKey) -> None:
    """A key record brought from elsewhere (a moved tenant's, services/tenantmove.py) must be of
    the form apikey_create makes: a name, a 12-hex-digit prefix, the cell's name (or none) and
    a SHA-256 hex digest. Its secret cannot be checked, only that such a secret could exist."""
    check_name("name", key.name)
    if not isinstance(key.prefix, str) or not KEY_PREFIX.fullmatch(key.prefix):
        raise InvalidInput("prefix", "must be 12 lowercase hexadecimal digits, as this app makes them")
    if key.cell and not re.fullmatch(CELL_NAME, key.cell):
        raise InvalidInput("cell", f"{key.cell!r} is not a cell name (CRONFLEET_CELL: {CELL_NAME})")
    if not isinstance(key.key_hash, str) or not KEY_HASH.fullmatch(key.key_hash):
        raise InvalidInput("key_hash", "must be a SHA-256 digest in lowercase hexadecimal, as this app makes them")


def apikey_create(*, tenant: Tenant | None, name: str, actor: str = "") -> tuple[ApiKey, str]:
    """Make an API key; return it and its secret text, which is shown once and never kept.

    tenant None makes a staff key (tenant administration), which no quota counts."""
    name = check_name("name", name)
    prefix, cell = secrets.token_hex(6), app_settings.CELL
    raw = f"cf_{cell + '_' if cell else ''}{prefix}_{secrets.token_urlsafe(24)}"
    with transaction.atomic():
        if tenant is not None:
            check_key_quota(tenant)
        key = ApiKey.objects.create(tenant=tenant, name=name, prefix=prefix, cell=cell, key_hash=_key_hash(raw))
        if tenant is not None:
            AuditEvent.objects.create(
                tenant=tenant, action="apikey.created", actor=actor, detail={"prefix": prefix, "name": name}
            )
    return key, raw


def apikey_revoke(key: ApiKey, *, actor: str = "") -> ApiKey:
    with transaction.atomic():
        if ApiKey.objects.filter(id=key.id, revoked_at__isnull=True).update(revoked_at=db_now()) and key.tenant_id:
            AuditEvent.objects.create(
                tenant_id=key.tenant_id,
                action="apikey.revoked",
                actor=actor,
                detail={"prefix": key.prefix, "name": key.name},
            )
    key.refresh_from_db()
    return key


def apikey_authenticate(raw: str) -> ApiKey | None:
    """The active key `raw` names, or None (malformed, unknown, revoked, inactive tenant).

    The row is found by its prefix; the hash (of the whole text, its cell too) is compared in
    constant time. A key naming another cell is taken where its tenant has moved to."""
    match = API_KEY_PATTERN.fullmatch(raw) if isinstance(raw, str) else None
    if match is None:
        return None
    key = ApiKey.objects.select_related("tenant").filter(prefix=match.group(2)).first()
    if key is None or not hmac.compare_digest(key.key_hash, _key_hash(raw)):
        return None
    if key.revoked_at is not None or (key.tenant is not None and not key.tenant.is_active):
        return None
    # Bookkeeping to the minute: this node's clock decides whether to write (no clock
    # query per request); the database's clock is what is written.
    now = node_now()
    if key.last_used_at is None or key.last_used_at < now - LAST_USED_RESOLUTION:
        ApiKey.objects.filter(id=key.id).update(last_used_at=Now())
        key.last_used_at = now
    return key
