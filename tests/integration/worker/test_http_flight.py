"""HTTP runs in flight (worker/flight.py): many attempts at once per worker process, each
keeping what a run called in turn keeps: its start and end compare-and-sets, its lease, its
deadline, its signature, its retry class, its recorded answer."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import timedelta

import pytest
from aiohttp import web
from django.utils.dateparse import parse_datetime

from scheduler_app import services
from scheduler_app.http import signing as webhooks
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, db_now
from scheduler_app.observability import metrics
from scheduler_app.worker import flight
from scheduler_app.worker.hostslots import FairSlots
from scheduler_app.worker.leases import LEASES
from tests.conftest import NOW, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
FINAL = {RunState.SUCCEEDED, RunState.FAILED, RunState.RETRYING, RunState.DEAD}


class AsyncReceiver:
    """An aiohttp receiver in a thread of its own: answers each request as `answer(request,
    body)` says (a coroutine returning a web.Response), logs the requests and counts how
    many were in its hands at once."""

    def __init__(self, answer=None, host="127.0.0.1"):
        self.requests: list[tuple[str, str, dict, bytes, float]] = []
        self.busy = self.most_busy = 0
        self.answer = answer or (lambda request, body: _ok())
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        threading.Thread(target=self._serve, args=(host, started), daemon=True).start()
        started.wait(10)
        self.url = f"http://{host}:{self.port}/hook?x=1"

    def _serve(self, host, started):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, host, 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()

    async def _handle(self, request):
        body = await request.read()
        self.requests.append((request.method, request.path_qs, dict(request.headers), body, time.time()))
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        try:
            return await self.answer(request, body)
        finally:
            self.busy -= 1

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


async def _ok(status=200, body=b"ok", headers=None, delay=0.0):
    if delay:
        await asyncio.sleep(delay)
    return web.Response(status=status, body=body, headers=headers or {})


@pytest.fixture
def receivers(settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    made = []

    def make(answer=None, host="127.0.0.1"):
        made.append(AsyncReceiver(answer, host))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture
def queued_runs(tenant):
    def make(url, count=1, **fields):
        fields.setdefault("max_attempts", 3)
        job_ids = []
        for _ in range(count):
            job_ids.append(
                services.job_create(
                    tenant,
                    services.JobSpec(
                        name=f"hook-{Job.objects.count()}",
                        target_kind="http",
                        every=3600,
                        http={"method": "POST", "url": url, "headers": {"X-Team": "ops"}, "body": '{"hello": 1}'},
                        **fields,
                    ),
                ).id
            )
        runs = JobRun.objects.bulk_create(
            [
                JobRun(job_id=job_id, tenant=tenant, scheduled_at=NOW, created_at=NOW, attempt=1, state=RunState.QUEUED)
                for job_id in job_ids
            ]
        )
        return [(run.id, 1) for run in runs]

    return make


def settled(pairs, timeout=30):
    """The runs once every one of them has ended (in a state a worker leaves it in)."""
    ids = [run_id for run_id, _ in pairs]
    wait_for(
        lambda: JobRun.objects.filter(id__in=ids, state__in=FINAL).count() == len(ids),
        timeout=timeout,
        what=f"{len(ids)} runs ended",
    )
    return {run.id: run for run in JobRun.objects.filter(id__in=ids)}


def test_many_runs_are_in_flight_at_once_each_signed_and_recorded(receivers, queued_runs, tenant):
    receiver = receivers(lambda request, body: _ok(body=b'{"done": true}', delay=0.3))
    pairs = queued_runs(receiver.url, count=300)

    handed = flight.FLIGHT.submit(pairs, worker="w", task_id="t")
    runs = settled(pairs)

    assert handed.in_flight == 300 and handed.duplicates == [] and handed.others == []
    assert receiver.most_busy >= 100, receiver.most_busy  # one at a time would take 90 s
    assert {run.state for run in runs.values()} == {RunState.SUCCEEDED}
    by_key = {}
    secrets = services.tenant_signing_secrets(tenant, db_now())
    for method, path, headers, body, _ in receiver.requests:
        assert (method, path, body, headers["X-Team"]) == ("POST", "/hook?x=1", b'{"hello": 1}', "ops")
        webhooks.verify(secrets, headers, body, now=int(time.time()))  # raises if the signature is wrong
        by_key[headers["webhook-id"]] = headers
    assert sorted(by_key) == sorted(run.fire_key for run in runs.values())  # one request a run
    result = json.loads(next(iter(runs.values())).result)
    assert (result["status"], result["body"], result["truncated"]) == (200, '{"done": true}', False)
    assert result["latency_ms"] >= 300


def test_each_tenant_signs_with_its_own_secrets_read_with_the_start(receivers, queued_runs, tenant):
    """The tenants' secret columns come with the start statement: a tenant made before
    secrets existed gets its first one, a tenant in a rotation's overlap signs with both,
    and each request of one group is signed for its own tenant."""
    receiver = receivers()
    tenant.webhook_secret_encrypted = ""
    tenant.save(update_fields=["webhook_secret_encrypted"])
    rotating = services.tenant_create(slug="rotating")
    old = services.tenant_signing_secrets(rotating, db_now())
    new = services.tenant_rotate_webhook_secret(rotating, overlap=timedelta(hours=1))
    pairs = queued_runs(receiver.url, count=3)
    config = {"method": "POST", "url": receiver.url, "headers": {}, "body": '{"hello": 1}'}
    job = Job.objects.create(tenant=rotating, name="rotating-hook", target_kind="http", target_config=config)
    (theirs,) = JobRun.objects.bulk_create(
        [JobRun(job=job, tenant=rotating, scheduled_at=NOW, created_at=NOW, attempt=1, state=RunState.QUEUED)]
    )

    flight.FLIGHT.submit([*pairs, (theirs.id, 1)], worker="w", task_id="t")
    runs = settled([*pairs, (theirs.id, 1)])

    assert {run.state for run in runs.values()} == {RunState.SUCCEEDED}
    tenant.refresh_from_db()
    first = services.tenant_signing_secrets(tenant, db_now())  # made by the worker
    assert tenant.webhook_secret_encrypted and len(first) == 1
    signed = {headers["webhook-id"]: headers for _, _, headers, _, _ in receiver.requests}
    for run in runs.values():
        headers, body = signed[run.fire_key], b'{"hello": 1}'
        if run.tenant_id == rotating.id:
            assert len(headers["webhook-signature"].split()) == 2
            webhooks.verify([new], headers, body, now=int(time.time()))
            webhooks.verify(old, headers, body, now=int(time.time()))
        else:
            assert len(headers["webhook-signature"].split()) == 1
            webhooks.verify(first, headers, body, now=int(time.time()))
            with pytest.raises(webhooks.InvalidSignature):
                webhooks.verify([new], headers, body, now=int(time.time()))


def test_the_in_flight_gauge_follows_the_attempts_being_sent(receivers, queued_runs):
    held: dict[str, asyncio.Event] = {}

    async def hold(request, body):  # on the receiver's loop, until the test lets them go
        await held.setdefault("gate", asyncio.Event()).wait()
        return await _ok()

    receiver = receivers(hold)
    pairs = queued_runs(receiver.url, count=20)
    sending = metrics.HTTP_IN_FLIGHT._value.get
    flight.FLIGHT.submit(pairs, worker="w", task_id="t")
    wait_for(lambda: receiver.busy == 20 and sending() == 20, timeout=15, what="20 attempts in flight on the gauge")
    receiver.loop.call_soon_threadsafe(held["gate"].set)
    settled(pairs)
    wait_for(lambda: sending() == 0, timeout=15, what="the gauge back to 0 once they ended")


def test_a_second_delivery_of_a_group_starts_nothing_and_is_counted(receivers, queued_runs):
    receiver = receivers()
    pairs = queued_runs(receiver.url, count=3)
    flight.FLIGHT.submit(pairs, worker="w")
    settled(pairs)

    again = flight.FLIGHT.submit(pairs, worker="w")

    assert again.in_flight == 0 and [o.state for o in again.duplicates] == ["duplicate"] * 3
    assert len(receiver.requests) == 3
    assert AuditEvent.objects.filter(action="run.duplicate_delivery").count() == 3


@pytest.mark.parametrize(
    ("status", "headers", "state", "error_start"),
    [
        (503, {}, "retrying", "http 503"),
        (429, {"Retry-After": "7"}, "retrying", "http 429"),
        (404, {}, "failed", "http 404"),
        (302, {"Location": "http://127.0.0.1:9/"}, "failed", "redirect_refused"),
        (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, "failed", "ssrf_blocked"),
    ],
)
def test_answers_are_classified_for_retry_as_in_turn(receivers, queued_runs, status, headers, state, error_start):
    receiver = receivers(lambda request, body: _ok(status=status, headers=headers, body=b"nope"))
    pairs = queued_runs(receiver.url)

    flight.FLIGHT.submit(pairs, worker="w")
    run = settled(pairs)[pairs[0][0]]

    assert run.state == state and run.error.startswith(error_start), run.error
    assert len(receiver.requests) == 1  # never followed anywhere
    if status == 429:
        assert 6.5 <= (run.next_attempt_at - run.finished_at).total_seconds() <= 7.5  # Retry-After honoured


def test_410_gone_fails_and_pauses_the_job(receivers, queued_runs):
    receiver = receivers(lambda request, body: _ok(status=410, body=b"gone"))
    pairs = queued_runs(receiver.url)

    flight.FLIGHT.submit(pairs, worker="w")
    run = settled(pairs)[pairs[0][0]]

    job = Job.objects.get(id=run.job_id)
    assert run.state == "failed" and not job.enabled and "410 Gone" in job.paused_note


def test_a_private_address_is_refused_and_never_contacted(receivers, queued_runs, settings):
    receiver = receivers()
    pairs = queued_runs(receiver.url)
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = []  # production: loopback is never allowed

    flight.FLIGHT.submit(pairs, worker="w")
    run = settled(pairs)[pairs[0][0]]

    assert run.state == "failed" and run.error.startswith("ssrf_blocked"), run.error
    assert receiver.requests == []


def test_a_dripping_server_is_cut_off_at_the_deadline(receivers, queued_runs):
    async def drip(request, body):
        response = web.StreamResponse(status=200, headers={"Content-Length": "1000"})
        await response.prepare(request)
        for _ in range(1000):
            await response.write(b"x")
            await asyncio.sleep(0.5)
        return response

    receiver = receivers(drip)
    pairs = queued_runs(receiver.url, timeout_seconds=2)

    began = time.monotonic()
    flight.FLIGHT.submit(pairs, worker="w")
    run = settled(pairs)[pairs[0][0]]

    assert run.state == "retrying" and run.error.startswith("timeout"), run.error
    assert time.monotonic() - began < 6


def test_the_body_kept_is_bounded(receivers, queued_runs, settings):
    settings.CRONFLEET_HTTP_MAX_RESPONSE_BYTES = 2048
    receiver = receivers(lambda request, body: _ok(body=b"y" * 100_000))
    pairs = queued_runs(receiver.url)

    flight.FLIGHT.submit(pairs, worker="w")
    run = settled(pairs)[pairs[0][0]]

    result = json.loads(run.result)
    assert run.state == "succeeded" and result["truncated"] is True and len(result["body"]) == 2048


def test_a_hanging_host_takes_only_its_share(receivers, queued_runs, settings):
    settings.CRONFLEET_HTTP_IN_FLIGHT = 1000  # the engine's slots were made with the defaults
    hanging = receivers(lambda request, body: _ok(delay=20), host="127.0.0.2")
    quick = receivers(lambda request, body: _ok(delay=0.05), host="127.0.0.3")
    stuck = queued_runs(hanging.url, count=600, timeout_seconds=10)
    fine = queued_runs(quick.url, count=400, timeout_seconds=10)

    flight.FLIGHT.submit(stuck, worker="w")
    flight.FLIGHT.submit(fine, worker="w")
    runs = settled(fine, timeout=30)

    # Before the hanging host's deadline: had it held every slot, the quick host's runs would
    # have waited for its calls to time out, and those would have ended first. (Its runs
    # beyond its share wait for a slot, still queued.)
    assert (
        not JobRun.objects.filter(id__in=[run_id for run_id, _ in stuck])
        .exclude(state__in=[RunState.RUNNING, RunState.QUEUED])
        .exists()
    )
    assert {run.state for run in runs.values()} == {RunState.SUCCEEDED}
    assert hanging.most_busy <= settings.CRONFLEET_HTTP_IN_FLIGHT_PER_HOST
    stuck_runs = settled(stuck, timeout=30)
    wait_for(lambda: flight.FLIGHT.pending() == 0, timeout=10, what="nothing left in flight")
    assert {run.state for run in stuck_runs.values()} == {RunState.RETRYING}
    assert {run.error.split(":")[0] for run in stuck_runs.values()} == {"timeout"}


def test_an_attempt_that_waited_for_a_slot_is_recorded_as_started_when_sent(receivers, queued_runs, settings):
    receiver = receivers(lambda request, body: _ok(delay=0.5))
    share = settings.CRONFLEET_HTTP_IN_FLIGHT_PER_HOST  # the engine's slots are made with the settings' values
    pairs = queued_runs(receiver.url, count=share + 50)  # 50 wait for the first to end

    flight.FLIGHT.submit(pairs, worker="w")
    runs = sorted(settled(pairs).values(), key=lambda run: run.started_at)

    spread = (runs[-1].started_at - runs[0].started_at).total_seconds()
    assert spread >= 0.4, spread  # the group's start would give every run the same started_at
    assert receiver.most_busy <= share
    for run in runs:
        assert parse_datetime(run.attempts[-1]["started_at"]) == run.started_at


def test_a_run_whose_lease_is_not_confirmed_is_not_called(receivers, queued_runs, monkeypatch):
    receiver = receivers()
    pairs = queued_runs(receiver.url)
    monkeypatch.setattr(LEASES, "holds", lambda run_id: False)  # as when renewals hang

    flight.FLIGHT.submit(pairs, worker="w")
    run = settled(pairs)[pairs[0][0]]

    assert run.state == "retrying" and run.error.startswith("lease_unconfirmed"), run.error
    assert receiver.requests == []


def test_fair_slots_give_a_freed_slot_to_the_least_busy_waiting_host():
    async def scenario():
        slots = FairSlots(total=4, per_host=3)
        for _ in range(3):
            await slots.acquire("slow")
        await slots.acquire("a")
        waiting = [asyncio.ensure_future(slots.acquire(host)) for host in ("slow", "b", "a")]
        await asyncio.sleep(0)
        assert slots.waiting() == 3 and slots.saturated_hosts() == 3
        slots.release("slow")  # a freed slot: b holds none, a one, slow two
        await asyncio.sleep(0)
        assert [w.done() for w in waiting] == [False, True, False]
        slots.release("a")
        await asyncio.sleep(0)
        assert [w.done() for w in waiting] == [False, True, True]
        return slots.in_flight

    assert asyncio.run(scenario()) == {"slow": 2, "b": 1, "a": 1}


def test_a_slot_is_taken_at_once_only_while_free_to_the_host():
    async def scenario():
        slots = FairSlots(total=2, per_host=1)
        assert slots.try_take("a")
        assert not slots.try_take("a")  # a's share is taken: it would wait
        waiting = asyncio.ensure_future(slots.acquire("a"))
        await asyncio.sleep(0)
        assert slots.try_take("b")  # a waits, but could not take it anyway
        assert not slots.try_take("c")  # none left
        slots.release("a")  # handed to the waiting attempt of a's, not left for the taking
        await asyncio.sleep(0)
        assert waiting.done() and slots.in_flight == {"a": 1, "b": 1}
        assert not slots.try_take("c")
        slots.release("b")
        assert slots.try_take("c")

    asyncio.run(scenario())
