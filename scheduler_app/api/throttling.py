"""Requests per minute per API key, counted in Redis.

A fixed one-minute window: INCR and EXPIRE in one MULTI/EXEC on the key
"cronfleet:api-rate:<caller>:<minute>", so every API process shares one count and a
crashed process leaves nothing behind. The limit is the tenant's api_requests_per_minute,
else CRONFLEET_API_REQUESTS_PER_MINUTE. Windows follow this node's clock; a few seconds of
skew between nodes moves a handful of requests into the neighbouring window.

Without a Redis URL rate limiting is off. When Redis does not answer, requests go through
(fail open) with a logged warning, and Redis is left alone for
CRONFLEET_RATE_LIMIT_RETRY_SECONDS so an outage costs one timeout, not one per request.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import redis
from django.conf import settings
from rest_framework import exceptions
from rest_framework.throttling import BaseThrottle

from scheduler_app.api.auth import api_key

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
REDIS_TIMEOUT_SECONDS = 0.5


@dataclass(frozen=True)
class Limit:
    caller: str  # "key:<prefix>" or "user:<id>"
    per_minute: int


def limit_for(request) -> Limit | None:
    key = api_key(request)
    if key is not None:
        per_minute = key.tenant.api_requests_per_minute if key.tenant is not None else None
        return Limit(f"key:{key.prefix}", per_minute or settings.CRONFLEET_API_REQUESTS_PER_MINUTE)
    if request.user is not None and request.user.is_authenticated:
        return Limit(f"user:{request.user.pk}", settings.CRONFLEET_API_REQUESTS_PER_MINUTE)
    return None


class Counter:
    """The shared Redis connection pool, and when Redis may next be asked after a failure."""

    def __init__(self) -> None:
        self.url = ""
        self.client: redis.Redis | None = None
        self.resume_at = 0.0

    def get(self) -> redis.Redis | None:
        url = settings.CRONFLEET_RATE_LIMIT_REDIS_URL
        if not url:
            return None
        if self.client is None or self.url != url:
            self.url, self.resume_at = url, 0.0
            self.client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_SECONDS,
                                               socket_connect_timeout=REDIS_TIMEOUT_SECONDS)
        return self.client

    def hit(self, caller: str, now: float) -> int | None:
        """Count one request in the current window; None when Redis cannot be asked."""
        client = self.get()
        if client is None or now < self.resume_at:
            return None
        window = int(now // WINDOW_SECONDS)
        name = f"cronfleet:api-rate:{caller}:{window}"
        try:
            with client.pipeline(transaction=True) as pipe:
                pipe.incr(name)
                pipe.expire(name, WINDOW_SECONDS * 2)
                count, _ = pipe.execute()
        except redis.RedisError as exc:  # fail open, by design (see the module docstring)
            self.resume_at = now + settings.CRONFLEET_RATE_LIMIT_RETRY_SECONDS
            logger.warning("API rate limiting is off for %ss: Redis did not answer (%s)",
                           settings.CRONFLEET_RATE_LIMIT_RETRY_SECONDS, exc)
            return None
        return count


counter = Counter()


def rate_limit_enabled() -> bool:
    return bool(settings.CRONFLEET_RATE_LIMIT_REDIS_URL)


def rate_limit_headers(request) -> dict[str, str]:
    """RateLimit-Limit, -Remaining and -Reset (seconds to the window's end) for a request the
    throttle counted; none when it was not counted (no caller, no Redis)."""
    state = getattr(request, "cronfleet_rate_limit", None)
    if state is None:
        return {}
    per_minute, remaining, reset = state
    return {"RateLimit-Limit": str(per_minute), "RateLimit-Remaining": str(remaining), "RateLimit-Reset": str(reset)}


class KeyRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        limit = limit_for(request)
        if limit is None:
            return True
        now = time.time()
        count = counter.hit(limit.caller, now)
        if count is None:
            return True
        reset = max(1, math.ceil(WINDOW_SECONDS - now % WINDOW_SECONDS))
        request.cronfleet_rate_limit = (limit.per_minute, max(0, limit.per_minute - count), reset)
        if count <= limit.per_minute:
            return True
        # Raised here rather than returning False, to say which limit was hit; DRF adds
        # the Retry-After header (seconds to the end of the window).
        raise exceptions.Throttled(wait=reset, detail=f"more than {limit.per_minute} requests a minute with this key.")
