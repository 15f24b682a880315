"""The concurrent client's request bytes (scheduler_app/http/aclient.py's _message): the
headers merged and checked as the blocking client's build_headers does, the part before the
signed headers made once per job and kept, a refusal raised on every attempt."""

from __future__ import annotations

import pytest

from scheduler_app.http import aclient
from scheduler_app.http.call import Call
from scheduler_app.http.client import build_headers

SIGNED = {"webhook-id": "job1@x", "webhook-timestamp": "1700000000", "cronfleet-attempt": "2"}


def call_with(headers: dict, *, method: str = "POST", host=("http", "127.0.0.1", 8080), body: bytes = b"{}") -> Call:
    return Call(
        run_id=1,
        attempt=2,
        fire_key="job1@x",
        scheduled_at="",
        method=method,
        url="",
        host=host,
        path="/hook?a=1",
        headers=headers,
        body=body,
        secrets=(),
        timeout=5.0,
        max_response_bytes=1024,
        allowed_networks=(),
    )


def test_the_request_is_the_blocking_clients_headers_kept_alive_in_order():
    headers = {
        "X-Team": "ops",
        "connection": "close",  # the client's own: dropped
        "Webhook-Id": "forged",  # signing's prefix: dropped
        "Cronfleet-Attempt": "9",  # signing sets it: its value wins, placed with the signed ones
        "x-team": "ops2",  # the same name again: the last one, in the first one's place
        "Accept": "application/json",
    }

    message = aclient._message(call_with(headers), SIGNED)

    assert message == (
        b"POST /hook?a=1 HTTP/1.1\r\n"
        b"Host: 127.0.0.1:8080\r\n"
        b"User-Agent: Cronfleet-Webhook/1\r\n"
        b"Accept-Encoding: identity\r\n"
        b"x-team: ops2\r\n"
        b"Accept: application/json\r\n"
        b"webhook-id: job1@x\r\n"
        b"webhook-timestamp: 1700000000\r\n"
        b"cronfleet-attempt: 2\r\n"
        b"Content-Length: 2\r\n"
        b"\r\n{}"
    )
    blocking = [f"{n}: {v}" for n, v in build_headers(headers, SIGNED, aclient.USER_AGENT) if n != "Connection"]
    assert message.split(b"\r\n")[2:-3] == [line.encode() for line in blocking]


def test_each_attempt_carries_its_own_signed_headers_after_the_kept_head():
    call = call_with({"X-Team": "ops"}, method="GET", host=("https", "::1", 443), body=b"")

    first = aclient._message(call, {**SIGNED, "webhook-timestamp": "1"})
    second = aclient._message(call, {**SIGNED, "webhook-timestamp": "2"})

    assert first.startswith(b"GET /hook?a=1 HTTP/1.1\r\nHost: [::1]\r\n") and b"Content-Length" not in first
    assert b"webhook-timestamp: 1\r\n" in first and b"webhook-timestamp: 2\r\n" in second
    assert first.replace(b"timestamp: 1", b"timestamp: 2") == second
    other = aclient._message(call_with({"X-Team": "dev"}), SIGNED)  # another job's headers: its own head
    assert b"X-Team: dev\r\n" in other and b"X-Team: ops" not in other


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"X-Bad": "a\r\nInjected: 1"}, "header 'X-Bad' contains CR, LF or NUL"),
        ({"bad name": "v"}, "header 'bad name': invalid header name"),
        ({"X-List": ["not", "text"]}, "header 'X-List': name and value must be str"),
        ({"X-Wide": "\u0100"}, "header 'X-Wide': value is not latin-1 encodable"),
    ],
)
def test_a_refused_header_is_refused_on_every_attempt(headers, message):
    call = call_with(headers)
    for _ in range(2):  # nothing of a refusal is kept
        with pytest.raises(ValueError) as refused:
            aclient._message(call, SIGNED)
        assert str(refused.value) == message


def test_a_refused_signed_header_is_refused_after_a_kept_head():
    call = call_with({"X-Team": "ops"})
    aclient._message(call, SIGNED)

    with pytest.raises(ValueError, match="contains CR, LF or NUL"):
        aclient._message(call, {**SIGNED, "webhook-timestamp": "1\r\nX: y"})
