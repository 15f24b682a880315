"""One outgoing call: its request made ready (Call), and what a client's failure to reach
its host reads as to the tenant (uncallable, UNCALLABLE)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from scheduler_app.http import guard, signing

# A run's or an alert's error when its host may not be called or does not resolve.
UNCALLABLE = "ssrf_blocked or unresolvable"


@dataclass(frozen=True)
class Call:
    """One attempt's request, made ready while the database is at hand (the tenant's
    secrets are read then), so that what remains, signing and sending it, needs none:
    the blocking client sends it at once, the worker's concurrent executor when a slot
    for its host is free (worker/flight.py)."""

    run_id: int
    attempt: int
    fire_key: str
    scheduled_at: str
    method: str
    url: str
    host: tuple[str, str, int]  # (scheme, host, port): what shares a slot and a connection pool
    path: str  # with the query, as guard.check_url gave it
    headers: dict
    body: bytes
    secrets: tuple[bytes, ...]
    timeout: float
    max_response_bytes: int
    allowed_networks: tuple

    def signed_headers(self, at: float) -> dict[str, str]:
        """The Standard Webhooks headers of this attempt signed at Unix time `at`."""
        return signing.headers(
            list(self.secrets), self.fire_key, int(at), self.body, attempt=self.attempt, scheduled_at=self.scheduled_at
        )


# What getaddrinfo says of a name that has no address (of any family, or of those asked for).
_NO_ADDRESS = {
    socket.EAI_NONAME,
    *(getattr(socket, code) for code in ("EAI_NODATA", "EAI_ADDRFAMILY") if hasattr(socket, code)),
}


def uncallable(exc: BaseException) -> bool:
    """Whether a client's exception is a refused address or a name with no address, which
    a tenant must not tell apart (the blocking client wraps the resolver's gaierror in
    HttpConnectionError; the concurrent one lets it through)."""
    if isinstance(exc, guard.BlockedTarget):
        return exc.reason == guard.SSRF_BLOCKED
    cause = exc if isinstance(exc, socket.gaierror) else exc.__cause__
    return isinstance(cause, socket.gaierror) and cause.errno in _NO_ADDRESS
