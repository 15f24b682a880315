"""The API's rate limits in the real Redis: per tenant across its keys, failed authentications
per client address, and the breaker in front of a Redis that stops answering."""

from __future__ import annotations

import itertools
import socket
import threading
import time

import pytest
import redis
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.api import throttling
from scheduler_app.models import ApiKey, Tenant
from tests.conftest import wait_for

_addresses = itertools.count(1)


def fresh_address() -> str:
    """A client address no other test used (counters live in Redis for two minutes)."""
    return f"198.51.{next(_addresses)}.{time.monotonic_ns() % 250 + 1}"


def key_client(tenant: Tenant | None, address: str = "127.0.0.1") -> APIClient:
    _, raw = services.apikey_create(tenant=tenant, name="rate")
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def fake_key_client(address: str, secret: str = "x" * 32) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer cf_{'0' * 12}_{secret}")  # well formed, unknown prefix
    return client


def make_tenant(**fields) -> Tenant:
    return Tenant.objects.create(slug=f"rate-{next(_addresses)}-{time.monotonic_ns() % 10**6}", name="Rate", **fields)


@pytest.fixture
def start_of_window():
    """The requests of a test land in one one-minute window."""
    wait_for(lambda: time.time() % 60 < 45, timeout=20, what="the start of a rate-limit window")


def test_a_tenants_keys_share_one_budget(db, settings, start_of_window):
    settings.CRONFLEET_API_TENANT_REQUESTS_PER_MINUTE = 4
    tenant = make_tenant(api_requests_per_minute=3)
    first, second = key_client(tenant), key_client(tenant)

    answers = [first.get("/api/v1/me"), second.get("/api/v1/me"), first.get("/api/v1/me"), second.get("/api/v1/me")]
    refused = second.get("/api/v1/me")

    assert [answer.status_code for answer in answers] == [200] * 4
    assert [answer["RateLimit-Remaining"] for answer in answers] == ["2", "2", "1", "0"]
    assert refused.status_code == 429
    [error] = refused.json()["errors"]
    assert error["field"] == "rate_limit"
    assert error["message"].startswith("more than 4 requests a minute for this tenant's keys together.")
    assert key_client(make_tenant()).get("/api/v1/me").status_code == 200  # other tenants are unaffected


def test_one_key_is_held_to_its_own_limit_within_the_tenants(db, settings, start_of_window):
    settings.CRONFLEET_API_TENANT_REQUESTS_PER_MINUTE = 100
    api = key_client(make_tenant(api_requests_per_minute=2))

    statuses = [api.get("/api/v1/me").status_code for _ in range(3)]

    assert statuses == [200, 200, 429]


def test_a_tenants_budget_is_never_below_one_keys(db, settings, start_of_window):
    settings.CRONFLEET_API_TENANT_REQUESTS_PER_MINUTE = 1
    api = key_client(make_tenant(api_requests_per_minute=3))

    statuses = [api.get("/api/v1/me").status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]


def test_an_unknown_key_costs_one_lookup_by_its_unique_prefix(db, django_assert_num_queries):
    with django_assert_num_queries(1) as captured:
        answer = fake_key_client(fresh_address()).get("/api/v1/me")

    assert answer.status_code == 401
    sql = captured.captured_queries[0]["sql"]
    assert '"scheduler_app_apikey"."prefix" = ' in sql
    assert ApiKey._meta.get_field("prefix").unique  # so the lookup is one index probe


def test_failed_authentications_are_limited_per_address_and_then_cost_no_query(
    db, settings, start_of_window, django_assert_num_queries
):
    settings.CRONFLEET_API_FAILED_AUTH_PER_MINUTE = 3
    address = fresh_address()
    attacker = fake_key_client(address)

    statuses = [attacker.get("/api/v1/me").status_code for _ in range(4)]
    with django_assert_num_queries(0):
        refused = attacker.get("/api/v1/me")

    assert statuses == [401, 401, 401, 429]
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    [error] = refused.json()["errors"]
    assert error["field"] == "rate_limit"
    assert error["message"].startswith("more than 3 failed authentications a minute from this address.")
    assert fake_key_client(fresh_address()).get("/api/v1/me").status_code == 401  # others are unaffected
    assert key_client(make_tenant(), fresh_address()).get("/api/v1/me").status_code == 200


def test_behind_trusted_proxies_the_address_is_the_one_the_outermost_proxy_saw(db, settings):
    settings.CRONFLEET_TRUSTED_PROXIES = 1
    client = APIClient(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9, 192.0.2.44")

    request = client.get("/api/v1/me").wsgi_request

    assert throttling.client_address(request) == "192.0.2.44"  # the first entry is the client's to forge


# --- Redis that does not answer ------------------------------------------------------------


class BlackHole:
    """A TCP server on loopback that accepts connections and reads, but never answers."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        self.open = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.open += 1
            threading.Thread(target=self.swallow, args=(conn,), daemon=True).start()

    def swallow(self, conn: socket.socket) -> None:
        with conn:
            while conn.recv(4096):
                pass
        with self.lock:
            self.open -= 1

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def black_hole():
    hole = BlackHole()
    yield hole
    hole.close()


def test_a_redis_that_accepts_but_never_answers_trips_the_breaker_and_no_request_waits_on_it_again(
    db, settings, monkeypatch, black_hole
):
    # Long enough that a request which waited on Redis would find the probe's connection closed.
    monkeypatch.setattr(throttling, "REDIS_TIMEOUT_SECONDS", 3)
    settings.CRONFLEET_RATE_LIMIT_RETRY_SECONDS = 1
    settings.CRONFLEET_RATE_LIMIT_REDIS_URL = f"redis://127.0.0.1:{black_hole.port}/0"
    api = key_client(make_tenant(api_requests_per_minute=1))

    tripping = api.get("/api/v1/me")  # waits one timeout, on one connection (no retries)
    wait_for(lambda: black_hole.open == 0, timeout=10, what="the timed-out connection to close")
    after = [api.get("/api/v1/me") for _ in range(5)]  # over the limit of 1, if Redis counted

    assert tripping.status_code == 200 and tripping.json()["rate_limit"]["enabled"] is False
    assert [answer.status_code for answer in after] == [200] * 5
    assert all(answer.json()["rate_limit"]["enabled"] is False for answer in after)
    assert black_hole.accepted == 1

    wait_for(
        lambda: time.monotonic() >= throttling.counter.closed_at,
        timeout=5,
        interval=0.05,
        what="the breaker's retry time to pass",
    )
    probing = api.get("/api/v1/me")

    # A background probe asks Redis; the request did not wait for it: the probe's connection
    # is still open (unanswered) when the request's answer is back.
    assert probing.status_code == 200 and probing.json()["rate_limit"]["enabled"] is False
    wait_for(lambda: black_hole.accepted == 2, timeout=5, what="the probe to connect")
    assert black_hole.open == 1
    assert api.get("/api/v1/me").status_code == 200 and black_hole.accepted == 2  # one probe at a time


def test_the_breaker_closes_again_once_a_probe_finds_redis_answering(db, settings):
    settings.CRONFLEET_RATE_LIMIT_RETRY_SECONDS = 1
    api = key_client(make_tenant())
    assert api.get("/api/v1/me").json()["rate_limit"]["enabled"] is True

    throttling.counter.trip(redis.TimeoutError("Timeout reading from socket"))
    tripped = api.get("/api/v1/me")

    assert tripped.json()["rate_limit"]["enabled"] is False and "RateLimit-Remaining" not in tripped

    def counted_again():
        answer = api.get("/api/v1/me")
        return answer.json()["rate_limit"]["enabled"] and "RateLimit-Remaining" in answer

    wait_for(counted_again, timeout=10, interval=0.3, what="the probe to find Redis answering")
