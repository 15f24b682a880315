"""Outbound HTTP client for the HTTP/webhook jobs, built on the SSRF guard.

No Django imports; standard library only.  One call of :func:`request` is one attempt:

* ``netguard.check_url`` vets the URL, then ``netguard.connect_checked`` resolves the host
  once, checks every address and connects to a checked one.  The HTTP client speaks over
  that socket (it never resolves the name again); Host and TLS SNI stay the original host.
* ``timeout`` is a wall-clock deadline for the whole attempt (connect, TLS, request,
  status line, headers, body).  It is enforced by a deadline checked between reads and a
  watchdog timer that shuts the socket down at the deadline, so a server that trickles
  one byte at a time cannot keep the attempt alive.
* At most ``max_response_bytes`` of the body are read; redirects are never followed; the
  body is never decompressed.
"""

from __future__ import annotations

import functools
import http.client
import re
import socket
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler_app.http import guard as netguard

ALLOWED_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

# Headers the client owns; a caller's value for them is ignored (case-insensitive).
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "user-agent", "accept-encoding"}
)
# Header prefix only ``signed_headers`` may set.
SIGNED_PREFIX = "webhook-"

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_FORBIDDEN_CHARS = re.compile(r"[\r\n\x00]")
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class HttpResult:
    status: int
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: bytes  # at most max_response_bytes
    truncated: bool  # the response had more than max_response_bytes
    elapsed: float  # seconds


class HttpTimeout(TimeoutError):
    """The whole-attempt deadline passed."""


class HttpConnectionError(OSError):
    """Could not connect, the connection broke, or the response was not valid HTTP."""


# --------------------------------------------------------------------------------------
# Headers
# --------------------------------------------------------------------------------------


def _validate_header(name: object, value: object) -> tuple[str, str]:
    if not isinstance(name, str) or not isinstance(value, str):
        raise ValueError(f"header {name!r}: name and value must be str")
    if _FORBIDDEN_CHARS.search(value):
        raise ValueError(f"header {name!r} contains CR, LF or NUL")
    _validate_name(name)
    try:
        value.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ValueError(f"header {name!r}: value is not latin-1 encodable") from exc
    return name, value


@functools.lru_cache(maxsize=1024)
def _validate_name(name: str) -> None:
    """A header name's checks, kept for a name that passed (a refusal raises again each time)."""
    if _FORBIDDEN_CHARS.search(name):
        raise ValueError(f"header {name!r} contains CR, LF or NUL")
    if not _TOKEN.match(name):
        raise ValueError(f"header {name!r}: invalid header name")


def build_headers(
    headers: Mapping[str, str],
    signed_headers: Mapping[str, str],
    user_agent: str,
) -> list[tuple[str, str]]:
    """Validate and merge the caller's headers with the fixed ones (Host and Content-Length
    are added by the connection). Raises ValueError before anything is sent."""
    return [*fixed_headers(headers, tuple(signed_headers), user_agent), *checked_signed_headers(signed_headers)]


def fixed_headers(headers: Mapping[str, str], signed_names: Sequence[str], user_agent: str) -> list[tuple[str, str]]:
    """build_headers' first part, the same for every attempt of a job: the client's own headers
    and the caller's, but those the client owns, the webhook-* ones and those that signing
    sets (`signed_names`), which come after them, from checked_signed_headers()."""
    caller = [_validate_header(n, v) for n, v in headers.items()]
    _validate_header("User-Agent", user_agent)
    signed = {name.lower() for name in signed_names}

    merged: dict[str, tuple[str, str]] = {}  # lower-cased name -> (name, value)
    for name, value in caller:
        lower = name.lower()
        if lower in RESERVED_HEADERS or lower.startswith(SIGNED_PREFIX) or lower in signed:
            continue
        merged[lower] = (name, value)
    return [
        ("User-Agent", user_agent),
        ("Accept-Encoding", "identity"),
        ("Connection", "close"),
        *merged.values(),
    ]


def checked_signed_headers(signed_headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """build_headers' second part: the signed headers, validated, but those the client owns
    (signing may set webhook-* and override a caller's header of the same name)."""
    merged: dict[str, tuple[str, str]] = {}
    for name, value in signed_headers.items():
        name, value = _validate_header(name, value)
        lower = name.lower()
        if lower in RESERVED_HEADERS:
            continue
        merged.pop(lower, None)
        merged[lower] = (name, value)
    return list(merged.values())


def joined_headers(items) -> dict[str, str]:
    """An answer's headers as HttpResult keeps them: lower-cased names, a repeated header's
    values joined with ", " (for the blocking client and the concurrent one)."""
    joined: dict[str, str] = {}
    for name, value in items:
        lower = name.lower()
        joined[lower] = f"{joined[lower]}, {value}" if lower in joined else value
    return joined


# --------------------------------------------------------------------------------------
# Deadline watchdog and connections
# --------------------------------------------------------------------------------------


class _Watchdog:
    """Shuts the current socket down when the deadline passes, unblocking any recv/send."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise HttpTimeout("request deadline exceeded")
        return left

    def set_sock(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.fired:
                self._shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._sock is not None:
                self._shutdown(self._sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        try:
            # The plain socket method works on the fd of an SSLSocket too, without
            # touching its SSL state from this thread.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass


class _CheckedMixin:
    """Connects through netguard.connect_checked; self.host stays the original host."""

    _guard_args: dict
    _watchdog: _Watchdog
    host: str  # http.client.HTTPConnection's, the class this is mixed into
    port: int

    def _checked_socket(self) -> socket.socket:
        wd = self._watchdog
        sock = netguard.connect_checked(self.host, self.port, timeout=wd.remaining(), **self._guard_args)
        wd.set_sock(sock)
        sock.settimeout(wd.remaining())
        return sock


class _CheckedHTTPConnection(_CheckedMixin, http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = self._checked_socket()


class _CheckedHTTPSConnection(_CheckedMixin, http.client.HTTPSConnection):
    def connect(self) -> None:
        raw = self._checked_socket()
        context = ssl.create_default_context()
        try:
            sock = context.wrap_socket(raw, server_hostname=self.host, do_handshake_on_connect=False)
        except BaseException:
            raw.close()
            raise
        self._watchdog.set_sock(sock)
        self.sock = sock
        sock.settimeout(self._watchdog.remaining())
        sock.do_handshake()


# --------------------------------------------------------------------------------------
# Request
# --------------------------------------------------------------------------------------


def request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] = {},  # noqa: B006 - read only
    body: bytes | None = None,
    timeout: float,
    max_response_bytes: int,
    allowed_networks: Sequence = (),
    user_agent: str = "Cronfleet-Webhook/1",
    resolver=socket.getaddrinfo,
    signed_headers: Mapping[str, str] = {},  # noqa: B006 - read only
) -> HttpResult:
    """Make one HTTP/1.1 request (one attempt, no redirects) and return its result.

    Raises ValueError for a bad method/header/argument (before any traffic),
    netguard.BlockedTarget for a refused URL or address, HttpTimeout when ``timeout``
    seconds (wall clock, whole attempt) pass, HttpConnectionError otherwise.
    """
    if not isinstance(method, str) or method.upper() not in ALLOWED_METHODS:
        raise ValueError(f"method {method!r} is not allowed")
    method = method.upper()
    if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
        raise ValueError("body must be bytes or None")
    if not timeout or timeout <= 0:
        raise ValueError("timeout must be positive")
    if max_response_bytes < 0:
        raise ValueError("max_response_bytes must be >= 0")
    header_list = build_headers(headers, signed_headers, user_agent)
    target = netguard.check_url(url)

    started = time.monotonic()
    watchdog = _Watchdog(started + timeout)
    cls = _CheckedHTTPSConnection if target.scheme == "https" else _CheckedHTTPConnection
    conn = cls(target.host, target.port, timeout=timeout)
    conn._guard_args = {"allowed_networks": allowed_networks, "resolver": resolver}
    conn._watchdog = watchdog
    response: http.client.HTTPResponse | None = None
    watchdog.start()
    try:
        try:
            conn.connect()
            # Keep our own reference: http.client drops conn.sock when the response will
            # close the connection, while the response still reads from the same socket.
            sock = conn.sock
            conn.putrequest(method, target.path_and_query, skip_accept_encoding=True)
            for name, value in header_list:
                conn.putheader(name, value)
            if body is not None or method in _BODY_METHODS:
                conn.putheader("Content-Length", str(len(body or b"")))
            conn.endheaders(bytes(body) if body else None)

            sock.settimeout(watchdog.remaining())
            response = conn.getresponse()

            result_headers = joined_headers(response.msg.items())

            limit = max_response_bytes + 1
            chunks: list[bytes] = []
            received = 0
            while received < limit:
                sock.settimeout(watchdog.remaining())
                chunk = response.read1(min(_READ_CHUNK, limit - received))
                if not chunk:
                    break
                chunks.append(chunk)
                received += len(chunk)
            if watchdog.fired:
                # The EOF (or error) may be the watchdog's shutdown, not the server's.
                raise HttpTimeout("request deadline exceeded")
            truncated = received > max_response_bytes
            if not truncated and response.length:
                raise HttpConnectionError("connection closed before the end of the body")
        except netguard.BlockedTarget:
            raise
        except (HttpTimeout, HttpConnectionError):
            if watchdog.fired:
                raise HttpTimeout("request deadline exceeded") from None
            raise
        except TimeoutError as exc:
            raise HttpTimeout(f"request deadline exceeded: {exc}") from exc
        except (OSError, http.client.HTTPException) as exc:
            if watchdog.fired:
                raise HttpTimeout("request deadline exceeded") from exc
            raise HttpConnectionError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        watchdog.cancel()
        if response is not None:
            response.close()
        conn.close()

    body_bytes = b"".join(chunks)[:max_response_bytes]
    return HttpResult(
        status=response.status,
        headers=result_headers,
        body=body_bytes,
        truncated=truncated,
        elapsed=time.monotonic() - started,
    )
