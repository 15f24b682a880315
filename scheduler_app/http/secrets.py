"""A tenant's webhook signing secrets, encrypted at rest: we must be able to read them back.

Fernet (AES-128-CBC + HMAC-SHA256) from `cryptography`. Keys come from
CRONFLEET_ENCRYPTION_KEYS (comma-separated Fernet keys, newest first: decrypting tries each,
encrypting uses the first, so keys rotate without a migration). Without it, one key is
derived from Django's SECRET_KEY, which is then what protects the secrets.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction

from scheduler_app.conf import app_settings
from scheduler_app.http.signing import new_secret
from scheduler_app.models import Tenant


def encryption_keys() -> list[str]:
    """The Fernet keys this process reads and writes secrets with, newest first."""
    keys = list(app_settings.ENCRYPTION_KEYS)
    if not keys:
        digest = hashlib.sha256(b"cronfleet-encryption:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    return keys


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(key) for key in encryption_keys()])


def encrypt(text: str) -> str:
    return _fernet().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    """The plaintext; ValueError when no configured key opens the token."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError("cannot decrypt: no CRONFLEET_ENCRYPTION_KEYS key matches") from None


def tenant_signing_secrets(tenant: Tenant, now: datetime) -> list[str]:
    """The secrets that sign a delivery now: the current one, and the previous one while
    its overlap lasts. Tenants made before secrets existed get their first one here."""
    if not tenant.webhook_secret_encrypted:
        with transaction.atomic():  # two workers at once: the row lock makes one of them create it
            locked = Tenant.objects.select_for_update().get(id=tenant.id)
            if not locked.webhook_secret_encrypted:
                locked.webhook_secret_encrypted = encrypt(new_secret())
                locked.save(update_fields=["webhook_secret_encrypted"])
        tenant.refresh_from_db()
    secrets = [decrypt(tenant.webhook_secret_encrypted)]
    if (
        tenant.webhook_secret_previous_encrypted
        and tenant.webhook_secret_previous_until
        and tenant.webhook_secret_previous_until > now
    ):
        secrets.append(decrypt(tenant.webhook_secret_previous_encrypted))
    return secrets
