"""HTTP jobs against a real loopback receiver: signing, outcomes, retry classification. The same
through a real worker and beat is tests/system/targets/test_http_jobs.py."""

import asyncio
import json
import socket
import time
from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.http import aclient
from scheduler_app.http import secrets as crypto
from scheduler_app.http import signing as webhooks
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, db_now
from scheduler_app.targets.base import PermanentFailure, RetryableFailure
from scheduler_app.targets.http.perform import failure_of, prepare
from scheduler_app.worker import execution
from tests.conftest import NOW
from tests.integration.api.test_api import client_for, errors_of, job_body
from tests.support.http_receiver import Receiver


@pytest.fixture
def receiver_for(settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    made = []

    def make(*script, host="127.0.0.1"):
        made.append(Receiver(script, host))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture
def http_job(tenant):
    def make(url, **fields):
        fields.setdefault("max_attempts", 3)
        job = services.job_create(
            tenant,
            services.JobSpec(
                name=f"hook-{Job.objects.count()}",
                target_kind="http",
                every=3600,
                http={"method": "POST", "url": url, "headers": {"X-Team": "ops"}, "body": '{"hello": 1}'},
                **fields,
            ),
        )
        return job

    return make


def run_once(job, attempt=1):
    run = JobRun.objects.create(
        job=job, tenant=job.tenant, scheduled_at=NOW, created_at=NOW, attempt=attempt, state=RunState.QUEUED
    )
    outcome = execution.execute_run(run.id, attempt, worker="w")
    run.refresh_from_db()
    return outcome, run


def test_an_http_job_delivers_a_signed_request_and_records_the_outcome(receiver_for, http_job, tenant):
    receiver = receiver_for((200, {"Content-Type": "application/json"}, b'{"done": true}'))
    job = http_job(receiver.url)

    outcome, run = run_once(job)

    assert outcome.state == "succeeded"
    method, path, headers, body = receiver.requests[0]
    assert (method, path, body, headers["X-Team"]) == ("POST", "/hook?x=1", b'{"hello": 1}', "ops")
    assert headers["webhook-id"] == run.fire_key and headers["cronfleet-attempt"] == "1"
    tenant.refresh_from_db()
    secrets = services.tenant_signing_secrets(tenant, db_now())
    webhooks.verify(secrets, headers, body, now=int(db_now().timestamp()))  # raises if the signature is wrong
    result = json.loads(run.result)
    assert (result["status"], result["body"], result["truncated"]) == (200, '{"done": true}', False)


def test_secrets_are_encrypted_at_rest_and_rotation_signs_with_both(receiver_for, http_job, tenant):
    receiver = receiver_for()
    job = http_job(receiver.url)
    old = services.tenant_rotate_webhook_secret(tenant)
    new = services.tenant_rotate_webhook_secret(tenant, overlap=timedelta(hours=1))

    run_once(job)

    tenant.refresh_from_db()
    assert old not in tenant.webhook_secret_previous_encrypted and new not in tenant.webhook_secret_encrypted
    assert crypto.decrypt(tenant.webhook_secret_encrypted) == new
    _, _, headers, body = receiver.requests[0]
    assert headers["webhook-signature"].count("v1,") == 2
    for secret in (old, new):  # a receiver that knows only one of them still verifies
        webhooks.verify([secret], headers, body, now=int(db_now().timestamp()))


@pytest.mark.parametrize(
    ("status", "headers", "state", "error_start"),
    [
        (503, {}, "retrying", "http 503"),
        (500, {}, "retrying", "http 500"),
        (429, {"Retry-After": "7"}, "retrying", "http 429"),
        (404, {}, "failed", "http 404"),
        (400, {}, "failed", "http 400"),
        (302, {"Location": "http://127.0.0.1:9/"}, "failed", "redirect_refused"),
        (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, "failed", "ssrf_blocked"),
        (301, {"Location": "http://0x7f000001/"}, "failed", "redirect_refused"),  # loopback allowed here
        # a name with no address reads as a refused one: the tenant's server cannot probe names
        (302, {"Location": "http://no-such-host.invalid/"}, "failed", "ssrf_blocked or unresolvable: redirect to"),
    ],
)
def test_http_outcomes_are_classified_for_retry(receiver_for, http_job, status, headers, state, error_start):
    receiver = receiver_for((status, headers, b"nope"))
    job = http_job(receiver.url)

    outcome, run = run_once(job)

    assert (outcome.state, run.state) == (state, state)
    assert run.error.startswith(error_start)
    assert len(receiver.requests) == 1  # never followed anywhere
    if status == 429:
        assert 6.5 <= (run.next_attempt_at - run.finished_at).total_seconds() <= 7.5  # Retry-After honoured


def test_410_gone_fails_and_pauses_the_job(receiver_for, http_job):
    receiver = receiver_for((410, {}, b"gone"))
    job = http_job(receiver.url)

    outcome, run = run_once(job)

    job.refresh_from_db()
    assert outcome.state == "failed" and not job.enabled and "410 Gone" in job.paused_note
    assert AuditEvent.objects.filter(job_id=job.id, action="job.paused").exists()


def test_a_connection_error_retries_and_the_last_attempt_is_dead(settings, http_job):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    job = http_job("http://127.0.0.1:9/closed", max_attempts=2)  # port 9: nothing listens

    first, _ = run_once(job)
    JobRun.objects.all().delete()
    last, run = run_once(job, attempt=2)

    assert (first.state, last.state) == ("retrying", "dead")
    assert run.error.startswith("connection_error")


def test_a_redirect_to_a_private_address_is_ssrf_blocked_and_not_followed(receiver_for, http_job, settings):
    target = receiver_for(host="127.0.0.2")  # the private address a redirect points at
    receiver = receiver_for((302, {"Location": target.url}, b""))
    job = http_job(receiver.url)
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the first hop only

    outcome, run = run_once(job)

    assert outcome.state == "failed" and run.error.startswith(
        "ssrf_blocked or unresolvable: redirect to http://127.0.0.2:"
    )
    assert len(receiver.requests) == 1 and target.requests == []


def test_a_private_address_is_refused_without_retrying_and_never_contacted(receiver_for, http_job, settings):
    receiver = receiver_for()
    job = http_job(receiver.url)
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = []  # production: loopback is never allowed

    outcome, run = run_once(job)

    assert outcome.state == "failed" and run.error.startswith("ssrf_blocked")
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("http", "field"),
    [
        ({"url": "ftp://example.com/"}, "http.url"),
        ({"url": "http://user:pw@example.com/"}, "http.url"),
        ({"url": "https://example.com/", "method": "TRACE"}, "http.method"),
        ({"url": "https://example.com/", "headers": {"X-A": "1\r\nInjected: yes"}}, "http.headers.X-A"),
        ({"url": "https://example.com/", "headers": {"User-Agent": "me"}}, "http.headers.User-Agent"),
        ({"url": "https://example.com/", "headers": {"webhook-id": "x"}}, "http.headers.webhook-id"),
        ({"url": "https://example.com/", "body": "x" * 70000}, "http.body"),
        ({}, "http.url"),
        ({"url": "https://example.com/", "headers": {"X A": "1"}}, "http.headers.X A"),
        ({"url": "https://example.com/", "headers": {"X-A:": "1"}}, "http.headers.X-A:"),
        ({"url": "https://example.com/", "headers": {"": "1"}}, "http.headers"),
        ({"url": "https://example.com/", "headers": {"X-\u00c4": "1"}}, "http.headers.X-\u00c4"),
        ({"url": "https://example.com/", "headers": {"X-A": "5 \u20ac"}}, "http.headers.X-A"),
        ({"url": "https://example.com/", "headers": {"X-A": "a\u0007"}}, "http.headers.X-A"),
        ({"url": "https://example.com/", "headers": {"X-A": "a\u0085"}}, "http.headers.X-A"),
        ({"url": "https://example.com/", "headers": {"X-A": "a\u007f"}}, "http.headers.X-A"),
        ({"url": "https://example.com/caf\u00e9"}, "http.url"),
        ({"url": "https://example.com/?q=\u00fc"}, "http.url"),
        ({"url": "https://example.com/a b"}, "http.url"),
        ({"url": "https://example.com/50%"}, "http.url"),
    ],
)
def test_bad_http_targets_are_refused_at_creation(tenant, http, field):
    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(tenant, services.JobSpec(name="bad", target_kind="http", every=60, http=http))

    assert caught.value.field == field
    assert not Job.objects.exists()


def test_a_non_ascii_url_is_refused_with_its_percent_encoded_form(tenant):
    with pytest.raises(services.InvalidInput, match="write https://example.com/caf%C3%A9[?]q=%C3%BC$"):
        services.job_create(
            tenant,
            services.JobSpec(
                name="bad", target_kind="http", every=60, http={"url": "https://example.com/caf\u00e9?q=\u00fc"}
            ),
        )


@pytest.mark.parametrize(
    ("http", "error_start"),
    [
        ({"headers": {"X A": "1"}}, "ValueError: header 'X A': invalid header name"),
        ({"headers": {"X-A:": "1"}}, "ValueError: header 'X-A:': invalid header name"),
        ({"headers": {"": "1"}}, "ValueError: header '': invalid header name"),
        ({"headers": {"X-A": "5 \u20ac"}}, "ValueError: header 'X-A': value is not latin-1 encodable"),
        ({"path": "/caf\u00e9"}, "UnicodeEncodeError"),
    ],
)
def test_what_creation_now_refuses_failed_every_delivery(receiver_for, http_job, http, error_start):
    receiver = receiver_for()
    job = http_job(receiver.url)
    config = {**job.target_config, "headers": http.get("headers", {})}
    config["url"] = config["url"].replace("/hook", http.get("path", "/hook"))
    Job.objects.filter(id=job.id).update(target_config=config)  # as saved before the checks

    outcome, run = run_once(job)

    assert outcome.state == "retrying" and run.error.startswith(error_start), run.error
    assert receiver.requests == []


def test_what_the_checks_accept_is_delivered_as_written(receiver_for, http_job):
    receiver = receiver_for()
    job = http_job(receiver.url.replace("/hook", "/caf%C3%A9/~a;b"))
    headers = {"X-Latin-1": "caf\u00e9 \u00bd", "X-Tab": "a\tb", "X-Empty": "", "X-Token!#$%&'*+.^_`|~": "1"}
    job = services.job_update(job, {"http": {**job.target_config, "headers": headers}})

    outcome, run = run_once(job)

    assert outcome.state == "succeeded", run.error
    _, path, received, _ = receiver.requests[0]
    assert path == "/caf%C3%A9/~a;b?x=1"
    assert {name: received.get(name) for name in headers} == {**headers, "X-Latin-1": "caf\u00e9 \u00bd"}


# --- addresses refused when saved, names that do not resolve ----------------------------------


@pytest.mark.parametrize(
    ("url", "category"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://2130706433/", "loopback"),  # decimal
        ("http://0177.0.0.1/", "loopback"),  # octal
        ("http://0x7f.1/", "loopback"),  # hex, short
        ("http://127.1/", "loopback"),  # short
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped
        ("http://[::ffff:7f00:1]/", "loopback"),
        ("http://10.1.2.3/", "private"),
        ("http://167772161/", "private"),  # 10.0.0.1
        ("http://192.168.1/", "private"),  # 192.168.0.1
        ("http://[fd00::1]/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://2852039166/", "metadata"),  # 169.254.169.254
        ("http://0251.0376.0251.0376/", "metadata"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://0/", "unspecified"),
    ],
)
def test_a_refused_address_in_any_form_is_refused_when_saved_through_the_api(tenant, settings, url, category):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = []
    api = client_for(tenant)

    response = api.post("/api/v1/jobs/", job_body(name="probe", target={"kind": "http", "url": url}), format="json")

    assert response.status_code == 400, response.content
    assert errors_of(response) == {
        "target.url": f"a {category} address is not allowed (CRONFLEET_HTTP_ALLOWED_NETWORKS)"
    }
    assert not Job.objects.filter(tenant=tenant).exists()


def test_an_allowed_network_is_accepted_when_saved_in_any_form_but_metadata_never(tenant, settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8", "169.254.0.0/16"]
    api = client_for(tenant)

    accepted = [
        api.post(
            "/api/v1/jobs/", job_body(name=f"ok-{n}", target={"kind": "http", "url": url}), format="json"
        ).status_code
        for n, url in enumerate(["http://127.0.0.1:9/", "http://2130706433/", "http://[::ffff:127.0.0.1]/"])
    ]
    metadata = api.post(
        "/api/v1/jobs/", job_body(name="meta", target={"kind": "http", "url": "http://169.254.169.254/"}), format="json"
    )

    assert accepted == [201, 201, 201]
    assert metadata.status_code == 400 and "metadata" in errors_of(metadata)["target.url"]


def test_an_edit_to_a_refused_address_is_refused_naming_http_url(http_job, settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = []
    job = http_job("https://hooks.example.com/cron")

    with pytest.raises(services.InvalidInput) as caught:
        services.job_update(job, {"http": {**job.target_config, "url": "http://0177.0.0.1:6379/"}})

    assert (caught.value.field, caught.value.message) == (
        "http.url",
        "a loopback address is not allowed (CRONFLEET_HTTP_ALLOWED_NETWORKS)",
    )


def test_a_name_that_does_not_resolve_reads_as_one_that_resolves_to_a_refused_address(http_job, settings, caplog):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = []
    missing = http_job("http://no-such-host.invalid/hook", max_attempts=3)
    refused = http_job("http://localhost:9/hook", max_attempts=3)  # resolves to loopback

    missing_outcome, missing_run = run_once(missing)
    refused_outcome, refused_run = run_once(refused)

    assert (missing_outcome.state, refused_outcome.state) == ("failed", "failed")  # neither retries
    assert missing_run.error == "ssrf_blocked or unresolvable: 'no-such-host.invalid' cannot be called"
    assert refused_run.error == "ssrf_blocked or unresolvable: 'localhost' cannot be called"
    logged = caplog.text  # the operator's log keeps which it was
    assert "Name or service not known" in logged and "resolves to 127.0.0.1 (loopback)" in logged


def test_the_concurrent_clients_failures_read_the_same(http_job, settings):
    # aclient (worker/flight.py's) lets the event loop's gaierror through unwrapped.
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = []
    calls = []
    for url in ("http://no-such-host.invalid/hook", "http://localhost:9/hook"):
        job = http_job(url)
        run = JobRun.objects.create(
            job=job, tenant=job.tenant, scheduled_at=NOW, created_at=NOW, attempt=1, state=RunState.QUEUED
        )
        calls.append(prepare(run, job, NOW))

    async def send(call) -> BaseException:
        async with aclient.session(connections=2) as http:
            try:
                await aclient.request(http, call, signed_headers={}, deadline=time.monotonic() + 10)
            except Exception as exc:  # noqa: BLE001 - what the client raised is the subject
                return exc
        raise AssertionError("answered")

    raised = [asyncio.run(send(call)) for call in calls]
    failures = [failure_of(call, exc) for call, exc in zip(calls, raised, strict=True)]
    temporary = failure_of(calls[0], socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"))

    assert isinstance(raised[0], socket.gaierror)  # unwrapped, unlike the blocking client's
    assert [type(failure) for failure in failures] == [PermanentFailure, PermanentFailure]
    assert [str(failure) for failure in failures] == [
        "ssrf_blocked or unresolvable: 'no-such-host.invalid' cannot be called",
        "ssrf_blocked or unresolvable: 'localhost' cannot be called",
    ]
    assert isinstance(temporary, RetryableFailure)  # a resolver that did not answer: retried
