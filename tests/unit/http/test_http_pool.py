"""The concurrent client's connections (scheduler_app/http/pool.py, through aclient.request)
against raw loopback servers that answer with exactly the bytes each test writes: keep-alive
reuse, a kept connection the server closed, bodies delimited by length, chunks or the end of
the connection, HEAD, the body bound. No database; 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import ipaddress
import time

import pytest

from scheduler_app.http import aclient
from scheduler_app.http.call import Call
from scheduler_app.http.client import HttpConnectionError

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


def call_to(port: int, *, method: str = "POST", limit: int = 1024) -> Call:
    return Call(
        run_id=1,
        attempt=1,
        fire_key="job1@x",
        scheduled_at="",
        method=method,
        url=f"http://127.0.0.1:{port}/hook",
        host=("http", "127.0.0.1", port),
        path="/hook?a=1",
        headers={"X-Job": "1"},
        body=b"{}" if method == "POST" else b"",
        secrets=(),
        timeout=5.0,
        max_response_bytes=limit,
        allowed_networks=LOOPBACK,
    )


async def exchange(answers: list[bytes], calls: list[Call] | None = None, *, close_after: int = 0):
    """Serve `answers` in turn (one per request, on whichever connection it came); close each
    connection after `close_after` answers (0: never). Returns (results or exceptions,
    requests seen, connections accepted)."""
    seen: list[bytes] = []
    accepted = 0
    queue = list(answers)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        answered = 0
        try:
            while queue:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line[15:]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
                )
                seen.append(head + await reader.readexactly(length))
                writer.write(queue.pop(0))
                await writer.drain()
                answered += 1
                if close_after and answered >= close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    results = []
    async with aclient.session(connections=4) as pool:
        for call in calls or [call_to(port) for _ in answers]:
            call = Call(**{**call.__dict__, "host": ("http", "127.0.0.1", port)})
            try:
                results.append(await aclient.request(pool, call, signed_headers={}, deadline=time.monotonic() + 5))
            except Exception as exc:  # noqa: BLE001 - what the client raised is the subject
                results.append(exc)
            await asyncio.sleep(0.05)  # a server's close reaches the client before the next call
    server.close()
    await server.wait_closed()
    return results, seen, accepted


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_a_connection_is_kept_alive_and_reused():
    results, seen, accepted = asyncio.run(exchange([OK, OK, OK]))

    assert [(r.status, r.body) for r in results] == [(200, b"ok")] * 3
    assert accepted == 1
    first = seen[0].decode()
    assert first.startswith("POST /hook?a=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert "X-Job: 1\r\n" in first and "Accept-Encoding: identity\r\n" in first
    assert first.endswith("Content-Length: 2\r\n\r\n{}") and "Connection:" not in first


def test_a_kept_connection_the_server_closed_is_replaced():
    results, seen, accepted = asyncio.run(exchange([OK, OK], close_after=1))

    assert [r.status for r in results] == [200, 200]
    assert (len(seen), accepted) == (2, 2)


def test_connection_close_is_honoured():
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    results, _, accepted = asyncio.run(exchange([closing, OK]))

    assert [r.status for r in results] == [200, 200]
    assert accepted == 2


def test_a_body_ended_by_the_connection_chunks_and_a_head_answer():
    to_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"
    chunked = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    head = b"HTTP/1.1 204 No Content\r\nX-A: 1\r\nX-A: 2\r\nContent-Length: 50\r\n\r\n"
    results, _, _ = asyncio.run(
        exchange([to_close, chunked, head], [call_to(0), call_to(0), call_to(0, method="HEAD")], close_after=1)
    )

    assert [(r.status, r.body) for r in results] == [(200, b"all of it"), (201, b"abcde"), (204, b"")]
    assert results[2].headers["x-a"] == "1, 2"


def test_the_body_kept_is_bounded_and_the_connection_dropped():
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100
    results, _, accepted = asyncio.run(exchange([big, OK], [call_to(0, limit=10), call_to(0)]))

    assert (results[0].body, results[0].truncated) == (b"x" * 10, True)
    assert results[1].status == 200 and accepted == 2


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    ],
)
def test_an_answer_cut_short_is_a_connection_error(answer):
    results, _, _ = asyncio.run(exchange([answer], close_after=1))

    assert isinstance(results[0], HttpConnectionError)


def test_an_answer_that_is_not_http_is_a_connection_error():
    results, _, _ = asyncio.run(exchange([b"SSH-2.0-OpenSSH\r\n\r\n"], close_after=1))

    assert isinstance(results[0], HttpConnectionError)
