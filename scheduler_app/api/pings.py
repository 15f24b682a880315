"""The check-in endpoint: /ping/<key>[/start | /fail | /<exit status>], GET or POST (HEAD too).
From a named cell the URL is /ping/<cell>/<key>[/...]: the cell is read by the routing proxy
in front of the cells (deploy/nginx/cells.conf), and the key alone finds the job here.

No API key and no session: the ping key (random, unguessable, one per monitored job) is the
credential, so the view is CSRF-exempt and answers in plain text, as cron lines and shell
scripts expect (`curl -fsS -m 10 --retry 3 https://.../ping/<key>`). An unknown key, a key in
any spelling but its one (services.canonical_key), or an unknown last part answers 404 with
nothing to tell them apart.

In this order, each step before anything costs more:
1. an address this process saw go over CRONFLEET_PING_UNKNOWN_PER_MINUTE pings with an
   unknown key in this window: 429, with no database query and no Redis call;
2. a key not in its one spelling: counted against the address like an unknown key, 404, no
   lookup, and no Redis key of its own;
3. the lookup (one probe of the unique ping key); an unknown key counts against the address;
4. CRONFLEET_PING_REQUESTS_PER_MINUTE pings a minute per known key (then 429);
5. the ping itself: a job at CRONFLEET_PING_OWN_RUNS_PER_HOUR runs of its own answers
   200 "not recorded" for a ping that found no open fire (docs/check-ins.md says why 200).
The address's count is the pings' own (api/throttling.py's counter, apart from the API's failed
authentications): API clients behind the same address are never refused for pings, nor pings
for the API's. Counted in Redis, one-minute windows; off without Redis, open when it fails.
Pings answered without touching the ledger are counted in cronfleet_pings_dropped_total.
"""

from __future__ import annotations

import time

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods
from rest_framework import exceptions

from scheduler_app import services
from scheduler_app.api import throttling
from scheduler_app.conf import app_settings
from scheduler_app.observability.errors import answers_server_errors
from scheduler_app.observability.metrics import PINGS_DROPPED
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
    counts = throttling.counter.hit([f"ping:{key}"], now)
    if counts is None or counts[0] <= app_settings.PING_REQUESTS_PER_MINUTE:
        return None
    return throttling.window_reset(now)


def _refused(exc: exceptions.Throttled) -> HttpResponse:
    PINGS_DROPPED.labels("unknown_keys").inc()
    return _text(f"rate limited: {exc.detail}\n", 429, Retry_After=str(int(exc.wait or 1)))


def _unknown(request) -> HttpResponse:
    """404 for an unknown key, counted against the caller's address (429 once it is over)."""
    try:
        throttling.unknown_pings.count(request)
    except exceptions.Throttled as exc:
        return _refused(exc)
    return _text(NOT_FOUND, 404)


@csrf_exempt
@require_http_methods(["GET", "POST", "HEAD"])
@answers_server_errors(text=True)  # a 500 says the id its traceback is logged under
def ping(request, key: str, action: str = "", cell: str = ""):
    try:
        signal_of(action)
    except ValueError:
        return _text(NOT_FOUND, 404)
    try:
        throttling.unknown_pings.check(request)
    except exceptions.Throttled as exc:
        return _refused(exc)
    key = services.canonical_key(key)
    if key is None:
        return _unknown(request)
    try:
        job = services.monitored_job(key)
    except services.UnknownKey:
        return _unknown(request)
    wait = _over_limit(key)
    if wait is not None:
        PINGS_DROPPED.labels("key_rate").inc()
        return _text(
            f"rate limited: more than {app_settings.PING_REQUESTS_PER_MINUTE} pings a minute with this key\n",
            429,
            Retry_After=str(wait),
        )
    body = request.read(BODY_LIMIT + 1) if request.method == "POST" else b""
    result = services.record_ping(key, action, body, job=job)
    if result.dropped:
        PINGS_DROPPED.labels("own_runs").inc()
        return _text(
            f"not recorded: this job recorded {app_settings.PING_OWN_RUNS_PER_HOUR} runs of its own "
            "(pings that found no open fire) in the last hour\n"
        )
    return _text("OK\n")
