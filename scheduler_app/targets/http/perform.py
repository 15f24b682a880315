"""One HTTP attempt: the job's URL called once, signed the Standard Webhooks way, and the
answer classified (a retry or not)."""

from __future__ import annotations

import email.utils
import ipaddress
import urllib.parse

from django.conf import settings

from scheduler_app.models import db_now
from scheduler_app.targets.base import PermanentFailure, RetryableFailure, to_text
from scheduler_app.targets.http import client, guard, signing
from scheduler_app.targets.http.secrets import tenant_signing_secrets


def perform(started) -> dict:
    """Call the job's URL for this started run; its answer, or a failure that says why."""
    return perform_http(started.run, started.job, started.now)


def perform_http(run, job, now) -> dict:
    """Call the job's URL once, signed the Standard Webhooks way; classify the answer.

    2xx succeeds; 429 (honouring Retry-After), 5xx, timeouts and connection errors retry;
    3xx (redirects are never followed), other 4xx and refused addresses do not; 410 Gone
    also pauses the job.
    """
    config = job.target_config
    body = config.get("body", "").encode()
    secrets = [signing.parse_secret(s) for s in tenant_signing_secrets(job.tenant, now)]
    signed = signing.headers(secrets, run.fire_key, int(now.timestamp()), body, attempt=run.attempt,
                              scheduled_at=run.scheduled_at.isoformat())
    try:
        response = client.request(
            config["method"], config["url"], headers=config.get("headers", {}), signed_headers=signed,
            body=body or None, timeout=job.timeout_seconds,
            max_response_bytes=settings.CRONFLEET_HTTP_MAX_RESPONSE_BYTES,
            allowed_networks=[ipaddress.ip_network(net) for net in settings.CRONFLEET_HTTP_ALLOWED_NETWORKS],
        )
    except guard.BlockedTarget as exc:
        raise PermanentFailure(f"{exc.reason}: {exc.detail}") from None
    except client.HttpTimeout:
        raise RetryableFailure(f"timeout: no complete answer within {job.timeout_seconds}s") from None
    except (client.HttpConnectionError, OSError) as exc:
        raise RetryableFailure(f"connection_error: {type(exc).__name__}: {exc}") from None
    outcome = {
        "status": response.status, "latency_ms": round(response.elapsed * 1000),
        "body": response.body.decode("utf-8", "replace"), "truncated": response.truncated,
    }
    summary = f"http {response.status}: {to_text(outcome)}"
    if 200 <= response.status < 300:
        return outcome
    if response.status == 429:
        raise RetryableFailure(summary, retry_after=retry_after_seconds(response.headers.get("retry-after")))
    if response.status >= 500:
        raise RetryableFailure(summary)
    if response.status == 410:
        raise PermanentFailure(summary, pause_note=f"paused: {config['url']} answered 410 Gone (run {run.id})")
    if 300 <= response.status < 400:
        raise PermanentFailure(f"{redirect_refusal(config['url'], response.headers.get('location'))}: {summary}")
    raise PermanentFailure(summary)


def redirect_refusal(url: str, location: str | None) -> str:
    """Why a redirect was not followed (none ever is): `ssrf_blocked` when it pointed at an
    address the guard refuses, else `redirect_refused`."""
    if not location:
        return "redirect_refused"
    allowed = [ipaddress.ip_network(net) for net in settings.CRONFLEET_HTTP_ALLOWED_NETWORKS]
    try:
        target = guard.check_url(urllib.parse.urljoin(url, location))
        guard.resolve_and_check(target.host, target.port, allowed_networks=allowed)
    except guard.BlockedTarget as exc:
        return f"ssrf_blocked: redirect to {location[:200]} ({exc.detail})"
    except OSError:  # the name does not resolve: nothing to guard against, still not followed
        pass
    return f"redirect_refused: redirect to {location[:200]} not followed"


def retry_after_seconds(value: str | None) -> float | None:
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
    return max(0.0, (when - db_now()).total_seconds())
