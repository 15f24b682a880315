"""The concurrent HTTP client: one attempt as a coroutine, many in flight on one event loop.

HTTP/1.1 on the event loop's own transports, each answer parsed by httptools (pool.py):
keep-alive connections pooled per checked address, no HTTP library's per-request objects.
The SSRF guard is ours and as strong as the blocking client's (client.py):

* the URL is vetted by guard.check_url before anything else (Call.host and Call.path are
  its result);
* the host is resolved once, by the event loop's getaddrinfo, and guard.check_resolved
  judges every address it answered (the same function the blocking client uses); the
  checked answer serves the same host for RESOLVED_SECONDS (an IP literal is checked as
  the resolver would answer it, without one);
* a connection is opened to a checked address itself, and pooled under it, so nothing
  resolves the name again and no other address can be reached; the original name stays
  the Host header and, for https, the TLS server name that the certificate is verified
  against (ssl.create_default_context: verified, as everywhere);
* redirects are never followed, nothing is decompressed (Accept-Encoding: identity), no
  cookie is kept, no proxy is taken from the environment;
* `deadline` bounds the whole attempt (resolve, connect, TLS, request, status, headers,
  body): asyncio.timeout cancels it there, so a server that drips a byte at a time cannot
  keep it alive; at most max_response_bytes of the body are kept, and a connection whose
  answer was cut short is closed.

Errors come out as the blocking client's: guard.BlockedTarget, client.HttpTimeout,
client.HttpConnectionError (a name the resolver does not know: its socket.gaierror).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import time

from scheduler_app.http import guard
from scheduler_app.http.client import (
    HttpConnectionError,
    HttpResult,
    HttpTimeout,
    checked_signed_headers,
    fixed_headers,
    joined_headers,
)
from scheduler_app.http.pool import Connection, Pool

USER_AGENT = "Cronfleet-Webhook/1"
RESOLVED_SECONDS = 2.0  # how long a name's checked addresses serve the next attempts
RESOLVED_MAX = 10_000  # names kept at most (then all forgotten at once)
_resolved: dict[tuple, tuple[float, list]] = {}  # (host, port, allowed networks) -> (until, checked addresses)
HEADS_MAX = 4096  # requests' heads kept at most (then all forgotten at once)
_heads: dict[tuple, bytes] = {}  # _head's key -> the request's bytes before its signed headers
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_TARGET = re.compile(r"/[\x21-\x7e]*")  # a request target as sent: printable ASCII, no space


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for a thread of its own: uvloop's when installed, else asyncio's.
    No loop policy is set: the process's other loops stay what they were."""
    try:  # the event loop this client runs fastest on, where it is installed
        import uvloop  # here, where a loop is made: a process that makes none does not load it
    except ImportError:  # pragma: no cover - asyncio's own loop serves as well, more slowly
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def session(*, connections: int, keepalive_seconds: float = 15.0) -> Pool:
    """The connections a worker process's event loop shares between all its attempts: at
    most `connections` open (busy and idle), idle ones closed after `keepalive_seconds`.
    Made inside the running loop; close() (or `async with`) closes those left idle."""
    return Pool(connections=connections, keepalive_seconds=keepalive_seconds)


async def request(pool: Pool, call, *, signed_headers: dict[str, str], deadline: float) -> HttpResult:
    """Send `call` (call.Call) once over `pool`; its answer by `deadline` (time.monotonic())."""
    scheme, host, port = call.host
    started = time.monotonic()
    if deadline <= started:
        raise HttpTimeout("request deadline exceeded")
    message = _message(call, signed_headers)  # ValueError before anything is sent
    try:
        async with asyncio.timeout(deadline - started):
            addresses = await _resolve_checked(host, port, call.allowed_networks)
            return await _send(pool, call, message, addresses, started)
    except TimeoutError:
        raise HttpTimeout("request deadline exceeded") from None


def _message(call, signed_headers: dict[str, str]) -> bytes:
    """The request's bytes: its line, headers (validated as client.build_headers does for the
    blocking client) and body. The part before the signed headers is the same for every
    attempt of a job: it is made once and kept (_head)."""
    head = _head(call, tuple(signed_headers))
    lines = [f"{n}: {v}" for n, v in checked_signed_headers(signed_headers)]
    body = call.body
    if body or call.method in _BODY_METHODS:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("\r\n")
    return head + "\r\n".join(lines).encode("latin-1") + body


def _head(call, signed_names: tuple[str, ...]) -> bytes:
    """The request line and the headers before the signed ones, ending in CRLF; kept per
    method, path, host, caller's headers and signed names (a refusal raises again each time)."""
    try:
        key = (call.method, call.path, call.host, tuple(call.headers.items()), signed_names)
        head = _heads.get(key)
    except TypeError:  # a value that is no str (and no hashable): refused by the checks below
        key, head = None, None
    if head is None:
        head = _make_head(call, signed_names)
        if key is not None:
            if len(_heads) >= HEADS_MAX:
                _heads.clear()
            _heads[key] = head
    return head


def _make_head(call, signed_names: tuple[str, ...]) -> bytes:
    scheme, host, port = call.host
    if not _TARGET.fullmatch(call.path):
        raise ValueError("the URL's path and query must be printable ASCII")
    default_port = guard.ALLOWED_SCHEMES[scheme]
    host_header = (f"[{host}]" if ":" in host else host) + ("" if port == default_port else f":{port}")
    lines = [f"{call.method} {call.path} HTTP/1.1", f"Host: {host_header}"]
    # The blocking client closes each connection; this one keeps them alive.
    lines += [f"{n}: {v}" for n, v in fixed_headers(call.headers, signed_names, USER_AGENT) if n != "Connection"]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


async def _resolve_checked(host: str, port: int, allowed_networks) -> list[guard.Addr]:
    """The host's addresses, every one checked. An IP literal (check_url has made it
    canonical) is its own answer: no resolver, no thread. A name's checked answer is kept
    RESOLVED_SECONDS for the next attempts to the same host, as HTTP clients' DNS caches
    do: only checked addresses are ever kept or connected to."""
    guard.check_port(host, port)
    key = (host, port, allowed_networks)
    cached = _resolved.get(key)
    now = time.monotonic()
    if cached is not None and cached[0] > now:
        return cached[1]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM
        )
        checked = guard.check_resolved(host, infos, allowed_networks)
        if len(_resolved) >= RESOLVED_MAX:
            _resolved.clear()
        _resolved[key] = (now + RESOLVED_SECONDS, checked)
        return checked
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    sockaddr = (host, port, 0, 0) if ip.version == 6 else (host, port)
    checked = guard.check_resolved(host, [(family, socket.SOCK_STREAM, 6, "", sockaddr)], allowed_networks)
    _resolved[key] = (now + RESOLVED_SECONDS, checked)
    return checked


async def _send(pool: Pool, call, message: bytes, addresses, started: float) -> HttpResult:
    scheme, host, _ = call.host
    last_error: BaseException | None = None
    for family, sockaddr in addresses:  # in resolver order, the next one if a connection fails
        try:
            connection = await pool.connect(scheme, family, sockaddr[0], sockaddr[1], host)
        except (ssl.SSLError, ssl.CertificateError) as exc:  # refused by TLS: no other address will do
            raise HttpConnectionError(f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:  # nothing was sent: another address may answer
            last_error = exc
            continue
        try:
            answer = await _exchange(pool, connection, call, message, scheme, family, sockaddr, host)
        except OSError as exc:
            raise HttpConnectionError(f"{type(exc).__name__}: {exc}") from exc
        body = b"".join(answer.chunks)
        return HttpResult(
            status=answer.status,
            headers=joined_headers(answer.headers),
            body=body[: call.max_response_bytes],
            truncated=answer.truncated,
            elapsed=time.monotonic() - started,
        )
    raise HttpConnectionError(f"{type(last_error).__name__}: {last_error}") from last_error


async def _exchange(pool: Pool, connection: Connection, call, message: bytes, scheme, family, sockaddr, host):
    """The answer over `connection`; over a new one to the same checked address if a kept
    connection was closed by the server before any byte of the answer came (as keep-alive
    clients do: the server had closed it while idle)."""
    head_only = call.method == "HEAD"
    try:
        return await connection.exchange(message, limit=call.max_response_bytes, head_only=head_only)
    except HttpConnectionError:
        if connection.requests == 1 or connection.got_bytes:
            raise
    finally:
        pool.release(connection)
    connection = await pool.connect(scheme, family, sockaddr[0], sockaddr[1], host)
    try:
        return await connection.exchange(message, limit=call.max_response_bytes, head_only=head_only)
    finally:
        pool.release(connection)
