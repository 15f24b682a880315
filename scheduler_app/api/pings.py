"""The check-in endpoint: /ping/<key>[/start | /fail | /<exit status>], GET or POST (HEAD too).
From a named cell the URL is /ping/<cell>/<key>[/...]: the cell is read by the routing proxy
in front of the cells (deploy/nginx/cells.conf), and the key alone finds the job here.

No API key and no session: the ping key (random, unguessable, one per monitored job) is the
credential, so the view is CSRF-exempt and answers in plain text, as cron lines and shell
scripts expect (`curl -fsS -m 10 --retry 3 https://.../ping/<key>`). An unknown or malformed
key, or an unknown last part, answers 404 with nothing to tell them apart.

Rate limits, counted in Redis by api/throttling.py's counter (the same one-minute windows
as the API's; off without Redis, and open when Redis fails): CRONFLEET_PING_REQUESTS_PER_MINUTE
pings a minute per key (then 429), and an unknown key counts as a failed authentication of
the caller's address (CRONFLEET_API_FAILED_AUTH_PER_MINUTE), so keys cannot be guessed at speed.
"""

from __future__ import annotations

import time

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods
from rest_framework import exceptions

from scheduler_app import services
from scheduler_app.api.throttling import count_failure, counter, window_reset
from scheduler_app.conf import app_settings
from scheduler_app.services.checkins import BODY_LIMIT, signal_of

NOT_FOUND = "not found\n"


def _text(body: str, status: int = 200, **headers: str) -> HttpResponse:
    response = HttpResponse(body, status=status, content_type="text/plain; charset=utf-8")
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def _over_limit(key: str) -> int | None:
    """Seconds until the window ends when `key` has sent more than its pings a minute; else None."""
    now = time.time()
    counts = counter.hit([f"ping:{key}"], now)
    if counts is None or counts[0] <= app_settings.PING_REQUESTS_PER_MINUTE:
        return None
    return window_reset(now)


@csrf_exempt
@require_http_methods(["GET", "POST", "HEAD"])
def ping(request, key: str, action: str = "", cell: str = ""):
    try:
        signal_of(action)
    except ValueError:
        return _text(NOT_FOUND, 404)
    key = key.lower()
    wait = _over_limit(key)
    if wait is not None:
        return _text(
            f"rate limited: more than {app_settings.PING_REQUESTS_PER_MINUTE} pings a minute with this key\n",
            429,
            Retry_After=str(wait),
        )
    body = request.read(BODY_LIMIT + 1) if request.method == "POST" else b""
    try:
        services.record_ping(key, action, body)
    except services.UnknownKey:
        try:
            count_failure(request)
        except exceptions.Throttled as exc:
            return _text("rate limited\n", 429, Retry_After=str(int(exc.wait or 1)))
        return _text(NOT_FOUND, 404)
    return _text("OK\n")
