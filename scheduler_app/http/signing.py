"""Standard Webhooks signing for outgoing webhook deliveries. No database, no clock, no Django.

Cronfleet signs every webhook it delivers following the Standard Webhooks specification
(https://www.standardwebhooks.com, the scheme used by Svix). Times are passed in as Unix
seconds; nothing here reads the clock.

What a delivery carries
-----------------------
Every request has these headers:

``webhook-id``
    The message id. It is the same on every retry of one delivery, so receivers can use it
    to drop duplicates.
``webhook-timestamp``
    When this attempt was signed, in integer Unix seconds.
``webhook-signature``
    One or more space-separated signatures of the form ``v1,<base64>``. While a secret is
    being rotated, both the current and the previous secret sign, so the header holds two
    signatures; a receiver only needs one of them to match.
``cronfleet-attempt``, ``cronfleet-scheduled-at``
    Informational (attempt number, and the scheduled fire time). They are *not* covered by
    the signature; do not base security decisions on them.

The ``v1`` signature is ``base64(HMAC-SHA256(key, f"{id}.{timestamp}.".encode() + body))``
where ``key`` is the base64-decoded part of the secret after ``whsec_`` and ``body`` is the
exact raw request body.

How to verify (for receivers)
-----------------------------
1. Read the raw body bytes exactly as received. Do not parse and re-serialise the JSON
   first: any change in whitespace or key order breaks the signature.
2. Check that ``webhook-timestamp`` is within a few minutes (5 by default) of your clock,
   both directions; this bounds replay of captured requests.
3. Recompute the ``v1`` signature with each secret you accept and compare it in constant
   time with each ``v1,`` entry of ``webhook-signature``; ignore entries of other versions.
   One match is enough.
4. Only then parse the body. Remember ``webhook-id`` to ignore redeliveries.

:func:`verify` does steps 2 and 3 and can be copied into a receiver (it only needs the
Python standard library). For example, in a Django view::

    import json
    import time

    from django.http import HttpResponse, HttpResponseBadRequest
    from scheduler_app.webhooks import InvalidSignature, verify

    SECRETS = ["whsec_...current...", "whsec_...previous, during rotation..."]

    def receive(request):
        try:
            verify(SECRETS, request.headers, request.body, now=int(time.time()))
        except InvalidSignature as exc:
            return HttpResponseBadRequest(f"bad webhook: {exc.reason}")
        payload = json.loads(request.body)
        ...
        return HttpResponse(status=204)

:func:`verify` raises :class:`InvalidSignature` (a ``ValueError``) with a short reason when
the request must be rejected, and a plain ``ValueError`` if one of *your* secrets is
malformed (a configuration error, not a bad request).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as _secrets
from collections.abc import Mapping, Sequence

SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
NEW_SECRET_BYTES = 32
DEFAULT_TOLERANCE = 300  # seconds, either side of `now`

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
HEADER_ATTEMPT = "cronfleet-attempt"
HEADER_SCHEDULED_AT = "cronfleet-scheduled-at"

_VERSION = "v1"
_INTEGER = re.compile(r"[0-9]+")


class InvalidSignature(ValueError):
    """The request fails verification; `reason` says why (safe to log, holds no secret)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def parse_secret(text: str) -> bytes:
    """Decode a ``whsec_<base64>`` secret to its key bytes; ValueError if malformed.

    The messages never include the secret itself.
    """
    if not isinstance(text, str):
        raise ValueError(f"webhook secret must be a str, not {type(text).__name__}")
    text = text.strip()
    if not text.startswith(SECRET_PREFIX):
        raise ValueError(f"webhook secret must start with {SECRET_PREFIX!r}")
    encoded = text[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"webhook secret is not valid base64 after the {SECRET_PREFIX!r} prefix") from None
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(f"webhook secret is too short: {len(key)} bytes, at least {MIN_SECRET_BYTES} required")
    return key


def new_secret() -> str:
    """A fresh random secret in ``whsec_<base64>`` form (32 random bytes)."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(NEW_SECRET_BYTES)).decode("ascii")


def _signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp}.".encode() + body


def sign(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of one message with one (decoded) secret."""
    digest = hmac.new(secret, _signed_content(msg_id, timestamp, body), hashlib.sha256).digest()
    return f"{_VERSION}," + base64.b64encode(digest).decode("ascii")


def signature_header(secrets: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret, space-separated.

    Pass the current secret and, during rotation, the previous one too.
    """
    if not secrets:
        raise ValueError("at least one webhook secret is required to sign")
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


def headers(
    secrets: Sequence[bytes],
    msg_id: str,
    timestamp: int,
    body: bytes,
    *,
    attempt: int,
    scheduled_at: str,
) -> dict[str, str]:
    """All headers of one delivery attempt of `body`, signed at `timestamp`."""
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_SIGNATURE: signature_header(secrets, msg_id, timestamp, body),
        HEADER_ATTEMPT: str(attempt),
        HEADER_SCHEDULED_AT: scheduled_at,
    }


def verify(
    secrets_text: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: int,
    tolerance: int = DEFAULT_TOLERANCE,
) -> None:
    """Check a received webhook; return None if it is authentic, raise otherwise.

    `secrets_text` are the ``whsec_`` secrets the receiver accepts (any one may match),
    `headers` the request headers (names are matched case-insensitively), `body` the raw
    request body and `now` the receiver's current Unix time in seconds.

    Raises InvalidSignature for a request to reject, ValueError for a malformed secret.
    """
    keys = [parse_secret(text) for text in secrets_text]
    if not keys:
        raise ValueError("at least one webhook secret is required to verify")

    lowered = {str(name).lower(): value for name, value in headers.items()}
    missing = [name for name in (HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE) if not lowered.get(name)]
    if missing:
        raise InvalidSignature(f"missing header(s): {', '.join(missing)}")
    msg_id = lowered[HEADER_ID]
    raw_timestamp = lowered[HEADER_TIMESTAMP].strip()
    signature_value = lowered[HEADER_SIGNATURE]

    if not _INTEGER.fullmatch(raw_timestamp):
        raise InvalidSignature(f"{HEADER_TIMESTAMP} is not an integer")
    timestamp = int(raw_timestamp)
    if timestamp < now - tolerance:
        raise InvalidSignature(f"{HEADER_TIMESTAMP} is too old")
    if timestamp > now + tolerance:
        raise InvalidSignature(f"{HEADER_TIMESTAMP} is too far in the future")

    candidates = []
    for entry in signature_value.split():
        version, sep, value = entry.partition(",")
        if sep and version == _VERSION:
            candidates.append(entry.encode("utf-8", "replace"))
    if not candidates:
        raise InvalidSignature(f"no {_VERSION} signature in {HEADER_SIGNATURE}")

    matched = False
    for key in keys:
        expected = sign(key, msg_id, timestamp, body).encode("ascii")
        for candidate in candidates:
            # No early exit: the work done does not depend on which entry matched.
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise InvalidSignature("no signature matches")
