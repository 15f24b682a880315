"""The concurrent client's connections: HTTP/1.1 on the event loop's transports, each
answer parsed by httptools (llhttp, the parser Node.js uses), kept alive and reused.

A connection is made only to an address the caller has checked (aclient.py resolves and
checks; this module resolves nothing), and is pooled under that address: a pooled
connection was made to a checked address, and an attempt takes one only after checking its
host's addresses itself. At most `connections` are open at once, busy and idle; an idle one
is closed after `keepalive_seconds`, or to make room for another address.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time

import httptools

from scheduler_app.http.client import HttpConnectionError

_SWEEP_SECONDS = 1.0  # how often idle connections past their keep-alive are looked for


class Pool:
    """A worker process's connections, made and used on one event loop."""

    def __init__(self, *, connections: int, keepalive_seconds: float = 15.0) -> None:
        self.limit = connections
        self.keepalive_seconds = keepalive_seconds
        self.tls = ssl.create_default_context()  # verified, as everywhere
        self._open = 0
        self._idle: dict[tuple, list[Connection]] = {}
        self._room: collections.deque[asyncio.Future] = collections.deque()
        self._swept = time.monotonic()

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()

    async def connect(self, scheme: str, family: int, ip: str, port: int, server_hostname: str) -> Connection:
        """A connection to the checked address (ip, port): an idle one, or a new one."""
        key = (scheme, ip, port, server_hostname)
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.usable(self.keepalive_seconds):
                return connection
            self._dispose(connection)
        await self._make_room()
        self._open += 1
        try:
            loop = asyncio.get_running_loop()
            _, connection = await loop.create_connection(
                lambda: Connection(key),
                host=ip,
                port=port,
                family=family,
                ssl=self.tls if scheme == "https" else None,
                server_hostname=server_hostname if scheme == "https" else None,
            )
        except BaseException:
            self._closed()
            raise
        return connection

    def release(self, connection: Connection) -> None:
        """Back to the pool when it may carry another request, else closed."""
        if connection.reusable():
            connection.idle_since = time.monotonic()
            self._idle.setdefault(connection.key, []).append(connection)
            self._wake()
        else:
            self._dispose(connection)
        now = time.monotonic()
        if now - self._swept > _SWEEP_SECONDS:
            self._swept = now
            self._sweep()

    def _dispose(self, connection: Connection) -> None:
        connection.close()
        self._closed()

    def _closed(self) -> None:
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._room and self._room[0].done():
            self._room.popleft()
        if self._room:
            self._room.popleft().set_result(None)

    async def _make_room(self) -> None:
        """Wait until one more connection may be opened: close the oldest idle one when at
        the limit, or wait for a connection to come back or close."""
        while self._open >= self.limit:
            oldest = min((idle[0] for idle in self._idle.values() if idle), key=lambda c: c.idle_since, default=None)
            if oldest is not None:
                self._idle[oldest.key].remove(oldest)
                self._dispose(oldest)
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._room.append(waiter)
            await waiter

    def _sweep(self) -> None:
        for key, idle in list(self._idle.items()):
            kept = [c for c in idle if c.usable(self.keepalive_seconds)]
            for connection in idle:
                if connection not in kept:
                    self._dispose(connection)
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]


class Answer:
    """One response as it arrives: status, headers, at most `limit` bytes of its body."""

    __slots__ = ("status", "headers", "chunks", "received", "limit", "truncated", "length", "chunked", "done")

    def __init__(self, limit: int) -> None:
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.received = 0
        self.limit = limit
        self.truncated = False
        self.length: int | None = None  # Content-Length, if the answer gave one
        self.chunked = False
        self.done: asyncio.Future | None = None


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: Answer | None = None
        self.lost = False
        self.requests = 0  # carried on it so far, the current one included
        self.got_bytes = False  # bytes of the current answer have arrived
        self.head_only = False  # the answer to a HEAD request: no body, whatever its headers say
        self.keep_alive = False  # the last answer leaves the connection open (read when it ends)
        self.idle_since = 0.0

    # -- the caller's side

    async def exchange(self, request: bytes, *, limit: int, head_only: bool) -> Answer:
        """Send `request` and wait for its whole answer (or the first `limit` bytes of its body)."""
        assert self.transport is not None  # connected
        self.answer = answer = Answer(limit)
        answer.done = asyncio.get_running_loop().create_future()
        self.head_only, self.got_bytes, self.keep_alive = head_only, False, False
        self.requests += 1
        self.transport.write(request)
        await answer.done
        return answer

    def usable(self, keepalive_seconds: float) -> bool:
        return not self.lost and time.monotonic() - self.idle_since < keepalive_seconds

    def reusable(self) -> bool:
        """Whether the last answer ended cleanly on a connection the server keeps open."""
        answer = self.answer
        return (
            not self.lost
            and answer is not None
            and answer.done is not None
            and answer.done.done()
            and not answer.done.cancelled()
            and answer.done.exception() is None
            and not answer.truncated
            and not self.head_only
            and self.keep_alive
        )

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        answer = self.answer
        if answer is None or answer.done is None or answer.done.done():
            self.close()  # bytes nobody asked for: this connection is not to be trusted again
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._end(HttpConnectionError(f"invalid HTTP answer: {exc}"))
        except httptools.HttpParserUpgrade:
            self._end(HttpConnectionError("the server switched protocols"))

    def connection_lost(self, exc) -> None:
        self.lost = True
        answer = self.answer
        if answer is None or answer.done is None or answer.done.done():
            return
        if answer.status and answer.length is None and not answer.chunked:
            self._end()  # a body delimited by the end of the connection
        else:
            self._end(HttpConnectionError("connection closed before the end of the answer"))

    # -- httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.answer is not None  # fed only while an answer is awaited
        self.answer.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        answer = self.answer
        assert answer is not None  # fed only while an answer is awaited
        answer.status = self.parser.get_status_code()
        if 100 <= answer.status < 200:  # an interim answer: the real one follows
            answer.headers.clear()
            answer.status = 0
            return
        for name, value in answer.headers:
            lower = name.lower()
            if lower == "content-length":
                answer.length = int(value) if value.strip().isdigit() else None
            elif lower == "transfer-encoding":
                answer.chunked = "chunked" in value.lower()
        if self.head_only:
            self._end()

    def on_body(self, body: bytes) -> None:
        answer = self.answer
        assert answer is not None  # fed only while an answer is awaited
        room = answer.limit + 1 - answer.received
        if room <= 0:
            return
        answer.chunks.append(body[:room])
        answer.received += min(len(body), room)
        if answer.received > answer.limit:  # the rest is never read: this connection is done
            answer.truncated = True
            self._end()
            self.close()

    def on_message_complete(self) -> None:
        if self.answer is not None and self.answer.status:
            self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it once the message is over
            self._end()

    def _end(self, exc: BaseException | None = None) -> None:
        answer = self.answer
        if answer is None or answer.done is None or answer.done.done():
            return
        if exc is None:
            answer.done.set_result(None)
        else:
            self.lost = True
            answer.done.set_exception(exc)
