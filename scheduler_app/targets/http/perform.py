"""One HTTP attempt: the job's URL called once, signed the Standard Webhooks way, and the
answer classified (a retry or not).

prepare() makes the attempt's Call (scheduler_app/http/call.py: its request and secrets)
while the database is at hand; the blocking client (http/client.py, perform()) or the
concurrent one (http/aclient.py, driven by worker/flight.py) sends it; failure_of() and answer() say what came of it, the same way
for both."""

from __future__ import annotations

import email.utils
import functools
import ipaddress
import logging
import time
import urllib.parse

from scheduler_app.conf import app_settings
from scheduler_app.http import client, guard, signing
from scheduler_app.http.call import UNCALLABLE, Call, uncallable
from scheduler_app.http.secrets import tenant_signing_secrets
from scheduler_app.ledger.chains import parent_fire
from scheduler_app.models import db_now
from scheduler_app.targets.base import PermanentFailure, RetryableFailure, to_text

logger = logging.getLogger(__name__)


def perform(started) -> dict:
    """Call the job's URL for this started run; its answer, or a failure that says why."""
    return perform_http(started.run, started.job, started.now)


def perform_http(run, job, now) -> dict:
    """Call the job's URL once, signed the Standard Webhooks way as it is sent (a batch's
    later runs are not signed at the batch's start); classify the answer."""
    call = prepare(run, job, now)
    try:
        response = client.request(
            call.method,
            call.url,
            headers=call.headers,
            signed_headers=call.signed_headers(time.time()),
            body=call.body or None,
            timeout=call.timeout,
            max_response_bytes=call.max_response_bytes,
            allowed_networks=call.allowed_networks,
        )
    except Exception as exc:  # noqa: BLE001 - failure_of() re-raises what it does not classify
        raise failure_of(call, exc) from None
    return answer(call, response, db_now)


def prepare(run, job, now, secrets: list[str] | None = None) -> Call:
    """The Call for this attempt of `run`: the job's request with the tenant's signing
    secrets at `now` (`secrets`: already read, for a group of one tenant's runs).
    BlockedTarget (as a PermanentFailure) when the URL is refused as it stands."""
    config = job.target_config
    try:
        target = checked_url(config["url"])
    except guard.BlockedTarget as exc:
        raise PermanentFailure(f"{exc.reason}: {exc.detail}") from None
    if secrets is None:
        secrets = tenant_signing_secrets(job.tenant, now)
    return Call(
        run_id=run.id,
        attempt=run.attempt,
        fire_key=run.fire_key,
        scheduled_at=run.scheduled_at.isoformat(),
        method=config["method"],
        url=config["url"],
        host=(target.scheme, target.host, target.port),
        path=target.path_and_query,
        headers={**config.get("headers", {}), **chain_headers(run)},
        body=config.get("body", "").encode(),
        secrets=tuple(parsed_secret(s) for s in secrets),
        timeout=float(job.timeout_seconds),
        max_response_bytes=app_settings.HTTP_MAX_RESPONSE_BYTES,
        allowed_networks=networks(tuple(app_settings.HTTP_ALLOWED_NETWORKS)),
    )


# What prepare() works out of a job's config and the settings is the same for every run of
# a job: each is pure, and kept (a group of a thousand runs parsed one URL a thousand times).
@functools.lru_cache(maxsize=4096)
def checked_url(url: str) -> guard.ParsedTarget:
    """guard.check_url(url), kept (a refusal is not: it raises again each time)."""
    return guard.check_url(url)


@functools.lru_cache(maxsize=1024)
def parsed_secret(text: str) -> bytes:
    return signing.parse_secret(text)


@functools.lru_cache(maxsize=16)
def networks(allowed: tuple[str, ...]) -> tuple:
    """CRONFLEET_HTTP_ALLOWED_NETWORKS as the guard reads them."""
    return tuple(ipaddress.ip_network(net) for net in allowed)


# A chained run's request names its parent's fire (docs/chains.md).
HEADER_PARENT_FIRE_KEY = "cronfleet-parent-fire-key"
HEADER_PARENT_RUN_ID = "cronfleet-parent-run-id"


def chain_headers(run) -> dict:
    """The headers naming a chained run's parent (none for other runs, and no query)."""
    if getattr(run, "parent_run_id", None) is None:
        return {}
    key, run_id = parent_fire(run)
    return {HEADER_PARENT_RUN_ID: str(run_id), **({HEADER_PARENT_FIRE_KEY: key} if key else {})}


def failure_of(call: Call, exc: BaseException) -> BaseException:
    """What a client's exception means for the run: refused addresses and names without an
    address do not retry, timeouts and connection errors (a resolver that did not answer
    among them) do; anything else is returned as it is.

    A name that does not exist and one that resolves to a refused address read the same to
    the tenant (one message, one retry class): otherwise a tenant could learn which internal
    names exist. The operator's log has which it was, and the address."""
    if uncallable(exc):
        logger.warning("run %s: HTTP job host %r cannot be called: %s", call.run_id, call.host[1], exc)
        return PermanentFailure(f"{UNCALLABLE}: {call.host[1]!r} cannot be called")
    if isinstance(exc, guard.BlockedTarget):
        return PermanentFailure(f"{exc.reason}: {exc.detail}")
    if isinstance(exc, client.HttpTimeout):
        return RetryableFailure(f"timeout: no complete answer within {call.timeout:g}s")
    if isinstance(exc, (client.HttpConnectionError, OSError)):
        return RetryableFailure(f"connection_error: {type(exc).__name__}: {exc}")
    return exc


def answer(call: Call, response: client.HttpResult, clock) -> dict:
    """The run's result for an answer, or the failure it means.

    2xx succeeds; 429 (honouring Retry-After, an HTTP date read against `clock()`), 5xx,
    timeouts and connection errors retry; 3xx (redirects are never followed), other 4xx
    and refused addresses do not; 410 Gone also pauses the job.
    """
    outcome = {
        "status": response.status,
        "latency_ms": round(response.elapsed * 1000),
        "body": response.body.decode("utf-8", "replace"),
        "truncated": response.truncated,
    }
    if 200 <= response.status < 300:
        return outcome
    summary = f"http {response.status}: {to_text(outcome)}"  # a failure's text: not made for a success
    if response.status == 429:
        raise RetryableFailure(summary, retry_after=retry_after_seconds(response.headers.get("retry-after"), clock))
    if response.status >= 500:
        raise RetryableFailure(summary)
    if response.status == 410:
        raise PermanentFailure(summary, pause_note=f"paused: {call.url} answered 410 Gone (run {call.run_id})")
    if 300 <= response.status < 400:
        raise PermanentFailure(f"{redirect_refusal(call.url, response.headers.get('location'))}: {summary}")
    raise PermanentFailure(summary)


def redirect_refusal(url: str, location: str | None) -> str:
    """Why a redirect was not followed (none ever is): UNCALLABLE when it pointed at an
    address the guard refuses or at a name with no address (one message for both, as in
    failure_of: the tenant's own server chooses the Location, and must not learn from it
    which internal names exist), else `redirect_refused`."""
    if not location:
        return "redirect_refused"
    allowed = [ipaddress.ip_network(net) for net in app_settings.HTTP_ALLOWED_NETWORKS]
    try:
        target = guard.check_url(urllib.parse.urljoin(url, location))
        guard.resolve_and_check(target.host, target.port, allowed_networks=allowed)
    except (guard.BlockedTarget, OSError) as exc:
        if uncallable(exc):
            logger.warning("redirect to %r not followed: %s", location[:200], exc)
            return f"{UNCALLABLE}: redirect to {location[:200]} not followed"
        if isinstance(exc, guard.BlockedTarget):  # an invalid URL: its own words
            return f"{exc.reason}: redirect to {location[:200]} ({exc.detail})"
    return f"redirect_refused: redirect to {location[:200]} not followed"


def retry_after_seconds(value: str | None, clock=db_now) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - clock()).total_seconds())
