"""What an HTTP job may be: its method, URL (checked by the SSRF guard when saved, and again
when called: a host written as a refused address, in any form, is refused when saved), headers
and body."""

from __future__ import annotations

from scheduler_app.conf import app_settings
from scheduler_app.http import guard
from scheduler_app.validation import InvalidInput, check_headers, check_url_path

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


MAX_HTTP_BODY = 64 * 1024


def check(spec, tenant: str | None = None) -> dict:
    """The target interface's check: the job spec's HTTP target as stored."""
    return validate_http(spec.http or {})


def validate_http(http: dict) -> dict:
    method = str(http.get("method") or "POST").upper()
    if method not in HTTP_METHODS:
        raise InvalidInput("http.method", f"must be one of {', '.join(HTTP_METHODS)}")
    url = http.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidInput("http.url", "is required")
    try:
        target = guard.check_url(url)
    except guard.BlockedTarget as exc:
        raise InvalidInput("http.url", exc.detail) from None
    refused = guard.literal_refusal(target.host, app_settings.HTTP_ALLOWED_NETWORKS)
    if refused:  # an address refused at every call is refused now
        raise InvalidInput("http.url", f"a {refused} address is not allowed (CRONFLEET_HTTP_ALLOWED_NETWORKS)")
    check_url_path("http.url", url)
    headers = check_headers("http.headers", http.get("headers") or {})
    body = http.get("body") or ""
    if not isinstance(body, str):
        raise InvalidInput("http.body", "must be text (JSON as a string)")
    if len(body.encode()) > MAX_HTTP_BODY:
        raise InvalidInput("http.body", f"must be at most {MAX_HTTP_BODY} bytes")
    return {"method": method, "url": url, "headers": headers, "body": body}
