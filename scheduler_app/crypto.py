"""Encryption at rest for secrets we must be able to read back (webhook signing secrets).

Fernet (AES-128-CBC + HMAC-SHA256) from `cryptography`. Keys come from
CRONFLEET_ENCRYPTION_KEYS (comma-separated Fernet keys, newest first: decrypting tries each,
encrypting uses the first, so keys rotate without a migration). Without it, one key is
derived from Django's SECRET_KEY, which is then what protects the secrets.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


def _fernet() -> MultiFernet:
    keys = list(settings.CRONFLEET_ENCRYPTION_KEYS)
    if not keys:
        digest = hashlib.sha256(b"cronfleet-encryption:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    return MultiFernet([Fernet(key) for key in keys])


def encrypt(text: str) -> str:
    return _fernet().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    """The plaintext; ValueError when no configured key opens the token."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError("cannot decrypt: no CRONFLEET_ENCRYPTION_KEYS key matches") from None
