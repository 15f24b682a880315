"""A MAC over a tenant document (docs/scaling.md), with a key the cells share
(CRONFLEET_TENANT_DOCUMENT_KEY): an importing cell that has the key takes only a document an
exporting cell with the same key wrote, unchanged.

The MAC is the document's last member, `"mac": "hmac-sha256:<hex>"`, over the exact text
before it, so the export can keep streaming its runs (MacWriter hashes what passes through)
and the document stays JSON. A cell without the key writes no MAC and checks none.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path
from typing import TextIO

from scheduler_app.conf import app_settings
from scheduler_app.validation import InvalidInput

SCHEME = "hmac-sha256"
# The tail dump() writes after the runs: the text before it is what the MAC covers.
TAIL_BYTES = 256  # more than the tail holds
BLOCK = 1024 * 1024
SEALED = re.compile(rb',\n "mac": "' + SCHEME.encode() + rb':(?P<mac>[0-9a-f]{64})"\n}\s*\Z')


def shared_key() -> bytes:
    return app_settings.TENANT_DOCUMENT_KEY.encode()


class MacWriter:
    """Writes to `out` and hashes what it writes; `seal()` ends the document with its MAC."""

    def __init__(self, out: TextIO, key: bytes) -> None:
        self.out = out
        self.digest = hmac.new(key, digestmod=hashlib.sha256)

    def write(self, text: str) -> None:
        self.digest.update(text.encode())
        self.out.write(text)

    def seal(self) -> None:
        self.out.write(f',\n "mac": "{SCHEME}:{self.digest.hexdigest()}"\n}}\n')


def verify_file(path: Path) -> None:
    """verified() for a file, read in blocks: its memory does not grow with the file."""
    key = shared_key()
    if not key:
        return
    size = path.stat().st_size
    with path.open("rb") as data:
        data.seek(max(0, size - TAIL_BYTES))
        tail = data.read()
        sealed = SEALED.search(tail)
        if sealed is None:
            raise unsealed()
        signed = size - len(tail) + sealed.start()
        digest = hmac.new(key, digestmod=hashlib.sha256)
        data.seek(0)
        while data.tell() < signed:
            digest.update(data.read(min(BLOCK, signed - data.tell())))
    if not hmac.compare_digest(sealed["mac"].decode(), digest.hexdigest()):
        raise mismatch()


def unsealed() -> InvalidInput:
    return InvalidInput(
        "mac",
        "the document carries no MAC, and this cell's CRONFLEET_TENANT_DOCUMENT_KEY requires "
        "one: export it from a cell with the same key",
    )


def mismatch() -> InvalidInput:
    return InvalidInput(
        "mac",
        "does not match the document: it was changed after the export, or the exporting "
        "cell's CRONFLEET_TENANT_DOCUMENT_KEY differs from this cell's",
    )


def verified(text: str) -> str:
    """The document's text, its MAC checked against this cell's key when it has one. Refused
    (field `mac`) when the key is set and the MAC is missing or does not match; with no key set,
    a MAC is left unchecked."""
    key = shared_key()
    if not key:
        return text
    data = text.encode()
    sealed = SEALED.search(data)
    if sealed is None:
        raise unsealed()
    if not hmac.compare_digest(
        sealed["mac"].decode(), hmac.new(key, data[: sealed.start()], hashlib.sha256).hexdigest()
    ):
        raise mismatch()
    return text
