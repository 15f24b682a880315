"""The concurrent HTTP client: one attempt as a coroutine, many in flight on one event loop.

Built on aiohttp for its HTTP/1.1 parser and its keep-alive pool per host (a C parser and
connection reuse are most of what a thousand attempts in flight cost). The SSRF guard is
ours and stays as strong as the blocking client's (client.py), whatever aiohttp would do:

* the URL is vetted by guard.check_url before anything else (Call.host and Call.path are
  its result);
* the host is resolved once, by the event loop's getaddrinfo, and guard.check_resolved
  judges every address it answered (the same function the blocking client uses); the
  checked answer serves the same host for RESOLVED_SECONDS (an IP literal is checked as
  the resolver would answer it, without one);
* aiohttp is handed the checked address itself as the URL's host, so it resolves nothing
  (its own resolver never runs for an IP literal) and cannot reach another address; the
  original name stays the Host header and, for https, the TLS server name that the
  certificate is verified against (ssl.create_default_context: verified, as everywhere);
* redirects are never followed, nothing is decompressed, no cookie is kept (one session
  serves every tenant), no proxy is taken from the environment;
* `deadline` bounds the whole attempt (resolve, connect, TLS, request, status, headers,
  body): asyncio.timeout cancels it there, so a server that drips a byte at a time cannot
  keep it alive; at most max_response_bytes of the body are read.

A pooled connection was made to a checked address; a new one is made only after a new
resolution and check. Errors come out as the blocking client's: guard.BlockedTarget,
client.HttpTimeout, client.HttpConnectionError.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time

import aiohttp

from scheduler_app.http import guard
from scheduler_app.http.client import (
    HttpConnectionError,
    HttpResult,
    HttpTimeout,
    build_headers,
    joined_headers,
)

_READ_CHUNK = 64 * 1024
USER_AGENT = "Cronfleet-Webhook/1"
RESOLVED_SECONDS = 2.0  # how long a name's checked addresses serve the next attempts
RESOLVED_MAX = 10_000  # names kept at most (then all forgotten at once)
_resolved: dict[tuple, tuple[float, list]] = {}  # (host, port, allowed networks) -> (until, checked addresses)


def session(*, connections: int, keepalive_seconds: float = 15.0) -> aiohttp.ClientSession:
    """The session a worker process's event loop shares between all its attempts: at most
    `connections` open connections (busy and idle), idle ones closed after
    `keepalive_seconds`. Made inside the running loop."""
    connector = aiohttp.TCPConnector(
        limit=connections,
        limit_per_host=0,
        use_dns_cache=False,
        ssl=ssl.create_default_context(),
        keepalive_timeout=keepalive_seconds,
        enable_cleanup_closed=True,
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        trust_env=False,
        skip_auto_headers=("Accept", "Content-Type"),
        timeout=aiohttp.ClientTimeout(total=None),
    )


async def request(
    http: aiohttp.ClientSession,
    call,
    *,
    signed_headers: dict[str, str],
    deadline: float,
) -> HttpResult:
    """Send `call` (call.Call) once over `http`; its answer by `deadline` (time.monotonic())."""
    header_list = [
        (name, value) for name, value in build_headers(call.headers, signed_headers, USER_AGENT) if name != "Connection"
    ]  # the blocking client closes; this one keeps connections alive
    scheme, host, port = call.host
    started = time.monotonic()
    if deadline <= started:
        raise HttpTimeout("request deadline exceeded")
    try:
        async with asyncio.timeout(deadline - started):
            addresses = await _resolve_checked(host, port, call.allowed_networks)
            return await _send(http, call, header_list, addresses, started)
    except TimeoutError:
        raise HttpTimeout("request deadline exceeded") from None


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
    return guard.check_resolved(host, [(family, socket.SOCK_STREAM, 6, "", sockaddr)], allowed_networks)


async def _send(http, call, header_list, addresses, started: float) -> HttpResult:
    scheme, host, port = call.host
    default_port = guard.ALLOWED_SCHEMES[scheme]
    host_header = (f"[{host}]" if ":" in host else host) + ("" if port == default_port else f":{port}")
    headers = [("Host", host_header), *header_list]
    body = call.body if call.body or call.method in ("POST", "PUT", "PATCH") else None
    last_error: BaseException | None = None
    for family, sockaddr in addresses:  # in resolver order, the next one if a connection fails
        ip = sockaddr[0]
        url = f"{scheme}://{f'[{ip}]' if family == socket.AF_INET6 else ip}:{port}{call.path}"
        try:
            async with http.request(
                call.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                server_hostname=host if scheme == "https" else None,
            ) as response:
                return await _read(response, call.max_response_bytes, started)
        except aiohttp.ClientConnectorError as exc:  # nothing was sent: another address may answer
            last_error = exc
            continue
        except (aiohttp.ClientError, OSError) as exc:
            raise HttpConnectionError(f"{type(exc).__name__}: {exc}") from exc
    raise HttpConnectionError(f"{type(last_error).__name__}: {last_error}") from last_error


async def _read(response: aiohttp.ClientResponse, max_response_bytes: int, started: float) -> HttpResult:
    result_headers = joined_headers(response.headers.items())
    limit = max_response_bytes + 1
    chunks: list[bytes] = []
    received = 0
    while received < limit:
        chunk = await response.content.read(min(_READ_CHUNK, limit - received))
        if not chunk:
            break
        chunks.append(chunk)
        received += len(chunk)
    truncated = received > max_response_bytes
    if truncated:
        response.close()  # the rest is never read: this connection cannot be reused
    elif response.content_length is not None and received < response.content_length:
        raise HttpConnectionError("connection closed before the end of the body")
    return HttpResult(
        status=response.status,
        headers=result_headers,
        body=b"".join(chunks)[:max_response_bytes],
        truncated=truncated,
        elapsed=time.monotonic() - started,
    )
