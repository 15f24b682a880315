"""scheduler_app.http.client against small loopback servers (no database, 127.0.0.1 only).
HTTPS with a real certificate, made by the openssl program, is tests/system/http/test_http_client.py."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scheduler_app.http import client as httpclient
from scheduler_app.http.client import HttpConnectionError, HttpResult, HttpTimeout
from scheduler_app.http.guard import BlockedTarget

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]


# A request's total deadline unless a test sets its own: a request that answered took less.
TIMEOUT = 5.0


def call(method: str, url: str, **kwargs) -> HttpResult:
    kwargs.setdefault("timeout", TIMEOUT)
    kwargs.setdefault("max_response_bytes", 1_000_000)
    kwargs.setdefault("allowed_networks", LOOPBACK)
    return httpclient.request(method, url, **kwargs)


# --------------------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, respond: Callable[[BaseHTTPRequestHandler], None]):
        self.respond = respond
        self.connections = 0
        self.requests: list[dict] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    def verify_request(self, request, client_address) -> bool:
        self.connections += 1
        return True

    def handle_error(self, request, client_address) -> None:
        pass  # clients that hang up early (the size cap) are expected

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.server.requests.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": list(self.headers.items()),
                "body": self.rfile.read(length) if length else b"",
            }
        )
        self.server.respond(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers=()) -> None:
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


@pytest.fixture
def http_server():
    servers: list[_Server] = []

    def start(respond: Callable[[BaseHTTPRequestHandler], None]) -> _Server:
        server = _Server(respond)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class RawServer:
    """Accepts connections and hands each socket to ``behaviour`` in its own thread."""

    def __init__(self, behaviour: Callable[[socket.socket, threading.Event], None]):
        self.behaviour = behaviour
        self.stop = threading.Event()
        self.connections = 0
        self.received = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with conn:
            try:
                self.behaviour(conn, self)
            except OSError:
                pass

    def read_request_head(self, conn: socket.socket) -> None:
        conn.settimeout(2)
        while b"\r\n\r\n" not in self.received:
            data = conn.recv(4096)
            if not data:
                return
            self.received += data

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def raw_server():
    servers: list[RawServer] = []

    def start(behaviour) -> RawServer:
        server = RawServer(behaviour)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def header(request: dict, name: str) -> list[str]:
    return [v for n, v in request["headers"] if n.lower() == name.lower()]


# --------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------


def test_get_json_response(http_server):
    payload = json.dumps({"ok": True}).encode()
    server = http_server(
        lambda h: send(h, 200, payload, [("Content-Type", "application/json"), ("X-Multi", "a"), ("X-Multi", "b")])
    )

    result = call("GET", server.url + "/hook?x=1")

    assert result.status == 200
    assert json.loads(result.body) == {"ok": True}
    assert result.truncated is False
    assert result.headers["content-type"] == "application/json"
    assert result.headers["content-length"] == str(len(payload))
    assert result.headers["x-multi"] == "a, b"
    assert all(name == name.lower() for name in result.headers)
    assert 0 <= result.elapsed < TIMEOUT, result.elapsed
    assert server.requests[0]["method"] == "GET"
    assert server.requests[0]["path"] == "/hook?x=1"
    assert header(server.requests[0], "Host") == [f"127.0.0.1:{server.server_address[1]}"]


def test_post_body_and_custom_headers_arrive(http_server):
    server = http_server(lambda h: send(h, 201, b"created"))

    result = call(
        "post", server.url + "/in", body=b'{"a": 1}', headers={"Content-Type": "application/json", "X-Tenant": "t1"}
    )

    assert result.status == 201 and result.body == b"created"
    req = server.requests[0]
    assert req["method"] == "POST"
    assert req["body"] == b'{"a": 1}'
    assert header(req, "Content-Type") == ["application/json"]
    assert header(req, "X-Tenant") == ["t1"]
    assert header(req, "Content-Length") == ["8"]


def test_reserved_headers_cannot_be_overridden_but_signed_headers_arrive(http_server):
    server = http_server(lambda h: send(h, 200, b"ok"))

    call(
        "POST",
        server.url + "/",
        body=b"abc",
        headers={
            "user-agent": "evil/1",
            "ACCEPT-ENCODING": "gzip",
            "Host": "internal.example",
            "Content-Length": "999",
            "Transfer-Encoding": "chunked",
            "Connection": "keep-alive",
            "Webhook-Signature": "forged",
            "X-Kept": "yes",
        },
        signed_headers={"webhook-id": "msg_1", "webhook-timestamp": "1700000000", "webhook-signature": "v1,sig"},
    )

    req = server.requests[0]
    assert header(req, "User-Agent") == ["Cronfleet-Webhook/1"]
    assert header(req, "Accept-Encoding") == ["identity"]
    assert header(req, "Host") == [f"127.0.0.1:{server.server_address[1]}"]
    assert header(req, "Content-Length") == ["3"]
    assert header(req, "Transfer-Encoding") == []
    assert header(req, "Connection") == ["close"]
    assert header(req, "Webhook-Signature") == ["v1,sig"]
    assert header(req, "Webhook-Id") == ["msg_1"]
    assert header(req, "Webhook-Timestamp") == ["1700000000"]
    assert header(req, "X-Kept") == ["yes"]
    assert req["body"] == b"abc"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"headers": {"X-Evil": "a\r\nX-Injected: 1"}},
        {"headers": {"X-Evil": "a\nb"}},
        {"headers": {"X-Evil\r\nX-Injected": "1"}},
        {"headers": {"X-Evil": "a\x00b"}},
        {"signed_headers": {"X-Evil": "a\rb"}},
    ],
)
def test_crlf_in_header_raises_and_nothing_is_sent(http_server, kwargs):
    server = http_server(lambda h: send(h, 200, b"ok"))

    with pytest.raises(ValueError, match="X-Evil"):
        call("GET", server.url + "/", **kwargs)

    assert server.connections == 0
    assert server.requests == []


def test_bad_method_raises(http_server):
    server = http_server(lambda h: send(h, 200, b"ok"))
    for method in ("CONNECT", "TRACE", "OPTIONS", "GET /x HTTP/1.1\r\n"):
        with pytest.raises(ValueError):
            call(method, server.url + "/")
    assert server.connections == 0


def test_redirect_is_returned_not_followed(http_server):
    second = http_server(lambda h: send(h, 200, b"second"))
    first = http_server(lambda h: send(h, 302, b"moved", [("Location", second.url + "/target")]))

    result = call("GET", first.url + "/start")

    assert result.status == 302
    assert result.headers["location"] == second.url + "/target"
    assert result.body == b"moved"
    assert first.connections == 1
    assert second.connections == 0


def test_huge_response_is_cut_at_the_cap(http_server):
    big = b"x" * (5 * 1024 * 1024)
    server = http_server(lambda h: send(h, 200, big))

    result = call("GET", server.url + "/", max_response_bytes=10_000)

    assert result.status == 200
    assert result.body == b"x" * 10_000
    assert result.truncated is True
    assert 0 <= result.elapsed < TIMEOUT, result.elapsed


def test_huge_close_delimited_response_is_cut_at_the_cap(raw_server):
    def behaviour(conn, server):
        server.read_request_head(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        for _ in range(500):  # up to 5 MB, until the client hangs up
            conn.sendall(b"y" * 10_000)

    server = raw_server(behaviour)
    result = call("GET", server.url + "/", max_response_bytes=25_000)
    assert result.body == b"y" * 25_000 and result.truncated is True
    assert 0 <= result.elapsed < TIMEOUT, result.elapsed


def test_body_exactly_at_the_cap_is_not_truncated(http_server):
    server = http_server(lambda h: send(h, 200, b"z" * 100))
    result = call("GET", server.url + "/", max_response_bytes=100)
    assert result.body == b"z" * 100 and result.truncated is False


def test_head_works(http_server):
    server = http_server(lambda h: send(h, 200, b"a body HEAD must not read", [("X-Head", "1")]))

    result = call("HEAD", server.url + "/")

    assert result.status == 200
    assert result.body == b""
    assert result.truncated is False
    assert result.headers["x-head"] == "1"
    assert server.requests[0]["method"] == "HEAD"


def _drip_body(head):
    """A handler that sends `head`, then one body byte every half second until stopped."""

    def handler(conn, server):
        server.read_request_head(conn)
        conn.sendall(head)
        while not server.stop.is_set():
            conn.sendall(b"a")
            time.sleep(0.5)

    return handler


_drip_body_with_length = _drip_body(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
# No Content-Length: the body ends at EOF, so the watchdog's shutdown must not pass for a
# complete response.
_drip_body_until_close = _drip_body(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")


def _drip_status_line(conn, server):
    server.read_request_head(conn)
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"s" * 1000:
        if server.stop.is_set():
            return
        conn.sendall(bytes([byte]))
        time.sleep(0.3)


@pytest.mark.parametrize("behaviour", [_drip_body_with_length, _drip_body_until_close, _drip_status_line])
def test_drip_server_hits_the_total_deadline(raw_server, behaviour):
    server = raw_server(behaviour)
    timeout = 1.2

    started = time.monotonic()
    with pytest.raises(HttpTimeout):
        call("GET", server.url + "/", timeout=timeout)
    elapsed = time.monotonic() - started

    print(f"timed out after {elapsed:.2f} s (deadline {timeout} s)")
    # Without the total deadline each byte would restart the read timeout: the drip would go
    # on for many times the deadline.
    assert timeout - 0.1 <= elapsed < 10 * timeout, elapsed
    assert server.connections == 1


def test_silent_server_times_out(raw_server):
    timeout = 0.5
    # The server stays silent far longer than the bound below: only the timeout ends the call.
    server = raw_server(lambda conn, s: (s.read_request_head(conn), s.stop.wait(60)))
    started = time.monotonic()
    with pytest.raises(HttpTimeout):
        call("GET", server.url + "/", timeout=timeout)
    elapsed = time.monotonic() - started

    print(f"timed out after {elapsed:.2f} s (timeout {timeout} s)")
    assert timeout - 0.1 <= elapsed < 10 * timeout, elapsed


def test_accept_and_close_is_a_connection_error(raw_server):
    server = raw_server(lambda conn, s: None)  # closes at once
    with pytest.raises(HttpConnectionError):
        call("GET", server.url + "/")
    assert server.connections == 1


def test_bad_status_line_is_a_connection_error(raw_server):
    def behaviour(conn, server):
        server.read_request_head(conn)
        conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")

    server = raw_server(behaviour)
    with pytest.raises(HttpConnectionError):
        call("GET", server.url + "/")


def test_short_body_is_a_connection_error(raw_server):
    def behaviour(conn, server):
        server.read_request_head(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a part")

    server = raw_server(behaviour)
    with pytest.raises(HttpConnectionError):
        call("GET", server.url + "/")


def test_connection_refused_is_a_connection_error():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    with pytest.raises(HttpConnectionError):
        call("GET", f"http://127.0.0.1:{port}/")


def test_loopback_blocked_without_allowed_networks(http_server):
    server = http_server(lambda h: send(h, 200, b"ok"))

    with pytest.raises(BlockedTarget) as excinfo:
        httpclient.request("GET", server.url + "/", timeout=2, max_response_bytes=100)

    assert excinfo.value.reason == "ssrf_blocked"
    assert server.connections == 0


def test_name_resolved_once_and_host_header_kept(http_server):
    server = http_server(lambda h: send(h, 200, b"ok"))
    port = server.server_address[1]
    calls = []

    def resolver(host, port_, family, type_):
        calls.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]

    result = call("GET", f"http://Hooks.Example.test:{port}/x", resolver=resolver)

    assert result.status == 200
    assert calls == ["hooks.example.test"]
    assert header(server.requests[0], "Host") == [f"hooks.example.test:{port}"]


def test_resolver_answer_is_checked(http_server):
    server = http_server(lambda h: send(h, 200, b"ok"))

    def resolver(host, port_, family, type_):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]

    with pytest.raises(BlockedTarget):
        httpclient.request(
            "GET",
            f"http://public.example.test:{server.server_address[1]}/",
            timeout=2,
            max_response_bytes=100,
            resolver=resolver,
        )
    assert server.connections == 0


def test_https_sends_sni_of_the_original_host(raw_server):
    def behaviour(conn, server):
        conn.settimeout(2)
        server.received += conn.recv(4096)  # the ClientHello; then hang up

    server = raw_server(behaviour)

    def resolver(host, port_, family, type_):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]

    with pytest.raises(HttpConnectionError):
        call("GET", f"https://hooks.example.test:{server.port}/", resolver=resolver)
    assert b"hooks.example.test" in server.received
