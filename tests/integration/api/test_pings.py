"""The check-in endpoint's limits in the real Redis and PostgreSQL: a key has one spelling,
unknown keys are counted per address before the lookup and apart from the API's failed
authentications. What pings record: tests/integration/dispatch/test_checkins.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.api import throttling
from scheduler_app.models import Job, JobRun, Tenant

PER_KEY = "cronfleet:api-rate:ping:*"  # the per-key counters' Redis keys


@pytest.fixture(autouse=True)
def mid_minute():
    """The limits count in one-minute windows of the clock: each test starts 5 s into one, so
    none of its pings falls into the next and every count is exact."""
    with time_machine.travel(datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC), tick=True):
        yield


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug=f"pings-{uuid.uuid4().hex[:8]}", name="Pings")


@pytest.fixture
def redis_client(db):
    client = throttling.counter.available()
    assert client is not None, "the pings' limits need the test Redis"
    return client


def fresh_address() -> str:
    """A client address no other test (or earlier run: counters live two minutes) used."""
    return f"2001:db8::{uuid.uuid4().hex[:4]}:{uuid.uuid4().hex[:4]}"


def monitored_key(tenant: Tenant) -> str:
    job = services.job_create(
        tenant,
        services.JobSpec(
            name=f"m-{uuid.uuid4().hex[:8]}", target_kind="monitor", cron="0 0 1 1 *", monitor={"grace_seconds": 300}
        ),
    )
    return str(Job.objects.get(id=job.id).monitor.ping_key)


def spellings(key: str, count: int) -> list[str]:
    """`count` spellings of `key` other than its own, each of which uuid.UUID reads as the key:
    upper case, braces, urn:uuid:, no hyphens, and hyphens moved, in mixed case."""
    digits = key.replace("-", "")
    found = {key.upper(), "{" + key + "}", "urn:uuid:" + key, "{" + key.upper() + "}", digits, digits.upper()}
    i = 0
    while len(found) < count:
        i += 1
        cased = "".join(c.upper() if (i >> (n % 12)) & 1 else c for n, c in enumerate(digits))
        cut = 1 + i % 31
        found.add(cased[:cut] + "-" + cased[cut:])
        found.add("urn:uuid:" + cased)
    found.discard(key)
    return sorted(found)[:count]


def unknown_pings(client: Client, keys: list[str]) -> list[tuple[int, int]]:
    """(status, queries the request made) for a ping of each key."""
    answers = []
    for key in keys:
        with CaptureQueriesContext(connection) as queries:
            status = client.get(f"/ping/{key}").status_code
        answers.append((status, len(queries.captured_queries)))
    return answers


def test_a_flood_in_300_spellings_of_one_key_records_one_run_and_no_redis_key_per_spelling(
    tenant, settings, redis_client
):
    # Neither limit stops this flood: what stops it is that a key has one spelling.
    settings.CRONFLEET_PING_UNKNOWN_PER_MINUTE = 10_000
    settings.CRONFLEET_PING_REQUESTS_PER_MINUTE = 10_000
    key = monitored_key(tenant)
    others = spellings(key, 299)
    assert len(set(others)) == 299 and {str(uuid.UUID(other)) for other in others} == {key}
    client = Client(REMOTE_ADDR=fresh_address())
    before = set(redis_client.scan_iter(match=PER_KEY, count=1000))

    answers = [client.get(f"/ping/{spelling}") for spelling in [*others, key]]

    assert JobRun.objects.filter(job__monitor__ping_key=key).count() == 1  # the bound (60) is far away
    new = {name.decode() for name in set(redis_client.scan_iter(match=PER_KEY, count=1000)) - before}
    assert {name.rsplit(":", 1)[0] for name in new} == {f"cronfleet:api-rate:ping:{key}"}
    assert {(answer.status_code, answer.content) for answer in answers[:-1]} == {(404, b"not found\n")}
    assert answers[-1].status_code == 200


def test_an_address_over_its_unknown_key_limit_gets_429_without_a_query(tenant, settings):
    settings.CRONFLEET_PING_UNKNOWN_PER_MINUTE = 3
    client = Client(REMOTE_ADDR=fresh_address())

    answers = unknown_pings(client, [str(uuid.uuid4()) for _ in range(12)])

    assert [status for status, _ in answers] == [404] * 3 + [429] * 9
    assert answers[0] == (404, 1)  # one lookup (the unique ping key), no other query
    assert [queries for status, queries in answers if status == 429] == [0] * 9
    answer = client.get(f"/ping/{uuid.uuid4()}")
    assert answer.status_code == 429 and 1 <= int(answer["Retry-After"]) <= 60
    assert answer.content.startswith(b"rate limited: more than 3 pings with an unknown key a minute")


def test_other_spellings_of_a_real_key_count_as_unknown_keys_and_are_never_looked_up(tenant, settings):
    settings.CRONFLEET_PING_UNKNOWN_PER_MINUTE = 3
    key = monitored_key(tenant)
    client = Client(REMOTE_ADDR=fresh_address())

    answers = unknown_pings(client, spellings(key, 12))

    assert {queries for _, queries in answers} == {0}
    assert [status for status, _ in answers] == [404] * 3 + [429] * 9
    assert Client(REMOTE_ADDR=fresh_address()).get(f"/ping/{key}").status_code == 200  # others are unaffected


def test_unknown_pings_never_lock_out_an_api_client_behind_the_same_address(tenant, settings):
    settings.CRONFLEET_PING_UNKNOWN_PER_MINUTE = 3
    settings.CRONFLEET_API_FAILED_AUTH_PER_MINUTE = 3
    address = fresh_address()
    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {services.apikey_create(tenant=tenant, name='ci')[1]}")

    answers = unknown_pings(Client(REMOTE_ADDR=address), [str(uuid.uuid4()) for _ in range(10)])

    assert 429 in {status for status, _ in answers}
    assert api.get("/api/v1/me").status_code == 200


def test_failed_api_authentications_never_refuse_the_pings_of_the_same_address(tenant, settings):
    settings.CRONFLEET_API_FAILED_AUTH_PER_MINUTE = 3
    address = fresh_address()
    attacker = APIClient(REMOTE_ADDR=address)
    attacker.credentials(HTTP_AUTHORIZATION=f"Bearer cf_{'0' * 12}_{'x' * 32}")
    key = monitored_key(tenant)
    pinger = Client(REMOTE_ADDR=address)

    statuses = [attacker.get("/api/v1/me").status_code for _ in range(10)]

    assert 429 in statuses
    assert pinger.get(f"/ping/{key}").status_code == 200
    assert pinger.get(f"/ping/{uuid.uuid4()}").status_code == 404
