"""API rate limits, counted in Redis: per key, per tenant, and failed authentications per address.

A fixed one-minute window: INCR and EXPIRE in one MULTI/EXEC on
"cronfleet:api-rate:<counter>:<minute>", so every API process shares one count and a crashed
process leaves nothing behind. A request with a key counts against two limits at once (one
round trip): its key's (the tenant's api_requests_per_minute, else
CRONFLEET_API_REQUESTS_PER_MINUTE) and its tenant's, shared by all the tenant's keys (the
larger of CRONFLEET_API_TENANT_REQUESTS_PER_MINUTE and the key limit), so making more keys
does not multiply a tenant's budget. A failed authentication counts against its client
address (CRONFLEET_API_FAILED_AUTH_PER_MINUTE); past that, the process that saw it refuses the
address's bearer requests until the window ends without asking the database. Pings with an
unknown key have a counter of their own per address (CRONFLEET_PING_UNKNOWN_PER_MINUTE, the
same machinery), so neither kind of failure refuses the other kind of request.
Windows follow this node's clock; a few seconds of skew between nodes moves a handful of
requests into the neighbouring window.

Without a Redis URL rate limiting is off. When Redis fails to answer, requests go through
(fail open: the limit protects the API from floods, and refusing every request would turn a
Redis outage into an API outage) with a logged warning, and a breaker stops asking it: for
CRONFLEET_RATE_LIMIT_RETRY_SECONDS no request talks to Redis, then one background probe
(never a request) checks whether it answers again. A Redis that accepts connections but never
answers costs the requests in flight when it stopped one timeout each, and nothing after that.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rest_framework import exceptions
from rest_framework.throttling import BaseThrottle

from scheduler_app.conf import app_settings
from scheduler_app.models import ApiKey
from scheduler_app.observability.callers import client_address
from scheduler_app.redisclient import client_from_url

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
REDIS_TIMEOUT_SECONDS = 0.5
# Addresses this process remembers as over their failed-authentication limit (bounded: a
# flood from many addresses cannot grow it without end; forgotten ones are counted again).
MAX_REFUSED_ADDRESSES = 10_000


@dataclass(frozen=True)
class Limit:
    counter: str  # "key:<prefix>", "tenant:<slug>" or "user:<id>"
    per_minute: int
    what: str  # ends the 429's message: "more than N requests a minute <what>"


def limits_for(request) -> list[Limit]:
    """What a request counts against, its own limit first; none for anonymous requests."""
    default = app_settings.API_REQUESTS_PER_MINUTE
    key = request.auth if isinstance(request.auth, ApiKey) else None
    if key is not None and key.tenant is not None:
        per_key = key.tenant.api_requests_per_minute or default
        per_tenant = max(app_settings.API_TENANT_REQUESTS_PER_MINUTE, per_key)
        return [
            Limit(f"key:{key.prefix}", per_key, "with this key"),
            Limit(f"tenant:{key.tenant.slug}", per_tenant, "for this tenant's keys together"),
        ]
    if key is not None:
        return [Limit(f"key:{key.prefix}", default, "with this key")]
    if request.user is not None and request.user.is_authenticated:
        return [Limit(f"user:{request.user.pk}", default, "in this session")]
    return []


def limit_for(request) -> Limit | None:
    """The caller's own limit (its key's or session's), as GET /me shows it."""
    limits = limits_for(request)
    return limits[0] if limits else None


class Counter:
    """The shared Redis client, and the breaker that stops asking it after a failure."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.url = ""
        self.client: redis.Redis | None = None
        self.errors: tuple[type[Exception], ...] = ()  # what the client raises when Redis does not answer
        self.closed_at = 0.0  # monotonic time before which Redis is not asked; 0: it answers
        self.probing = False

    def available(self) -> redis.Redis | None:
        """The client when Redis may be asked now; None when there is no Redis or the breaker
        is open (which starts a background probe once the retry time has passed)."""
        url = app_settings.RATE_LIMIT_REDIS_URL
        if not url:
            return None
        with self.lock:
            if self.client is None or self.url != url:
                # Imported here: most processes that load the URLconf never ask Redis, and the
                # Redis client is a large part of their start-up.
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry

                self.url, self.closed_at, self.probing = url, 0.0, False
                self.errors = (redis.RedisError,)
                self.client = client_from_url(
                    url,
                    socket_timeout=REDIS_TIMEOUT_SECONDS,
                    socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
                    retry=Retry(NoBackoff(), 0),
                )  # one try: a retry doubles the wait on a hung Redis
            if not self.closed_at:
                return self.client
            if time.monotonic() >= self.closed_at and not self.probing:
                self.probing = True
                threading.Thread(target=self.probe, args=(self.client,), name="rate-limit-probe", daemon=True).start()
            return None

    def is_on(self) -> bool:
        return bool(app_settings.RATE_LIMIT_REDIS_URL) and not self.closed_at

    def trip(self, exc: Exception) -> None:
        retry = app_settings.RATE_LIMIT_RETRY_SECONDS
        with self.lock:
            first = not self.closed_at
            self.closed_at = time.monotonic() + retry
        if first:
            logger.warning(
                "API rate limiting is off for %ss: Redis did not answer (%s); then a background probe asks it again",
                retry,
                exc,
            )

    def probe(self, client: redis.Redis) -> None:
        try:
            client.ping()
        except self.errors as exc:
            with self.lock:
                if self.client is client:
                    self.closed_at = time.monotonic() + app_settings.RATE_LIMIT_RETRY_SECONDS
                    self.probing = False
            logger.debug("Redis still does not answer (%s)", exc)
            return
        with self.lock:
            if self.client is client:
                self.closed_at, self.probing = 0.0, False
        logger.warning("API rate limiting is on again: Redis answers")

    def hit(self, counters: list[str], now: float) -> list[int] | None:
        """Count one request on each counter in the current window; None when Redis cannot be asked."""
        client = self.available()
        if client is None:
            return None
        window = int(now // WINDOW_SECONDS)
        try:
            with client.pipeline(transaction=True) as pipe:
                for counter in counters:
                    name = f"cronfleet:api-rate:{counter}:{window}"
                    pipe.incr(name)
                    pipe.expire(name, WINDOW_SECONDS * 2)
                replies = pipe.execute()
        except self.errors as exc:  # fail open, by design (see the module docstring)
            self.trip(exc)
            return None
        return replies[::2]


counter = Counter()


def rate_limit_enabled() -> bool:
    """A Redis is configured and answered the last time it was asked."""
    return counter.is_on()


def window_reset(now: float) -> int:
    return max(1, math.ceil(WINDOW_SECONDS - now % WINDOW_SECONDS))


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
        limits = limits_for(request)
        if not limits:
            return True
        now = time.time()
        counts = counter.hit([limit.counter for limit in limits], now)
        if counts is None:
            return True
        reset = window_reset(now)
        # The headers speak of the limit closest to refusing.
        limit, count = min(zip(limits, counts), key=lambda pair: pair[0].per_minute - pair[1])
        request.cronfleet_rate_limit = (limit.per_minute, max(0, limit.per_minute - count), reset)
        if count <= limit.per_minute:
            return True
        # Raised here rather than returning False, to say which limit was hit; DRF adds
        # the Retry-After header (seconds to the end of the window).
        raise exceptions.Throttled(wait=reset, detail=f"more than {limit.per_minute} requests a minute {limit.what}.")


# --- failures per client address: wrong API keys, unknown ping keys ---------------------


class RefusedAddresses:
    """Addresses over a limit of failures, as this process saw them: refused
    without asking Redis or the database until their window ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.until: dict[str, float] = {}

    def refuse(self, address: str, until: float) -> None:
        with self.lock:
            if len(self.until) >= MAX_REFUSED_ADDRESSES:
                now = time.time()
                self.until = {kept: end for kept, end in self.until.items() if end > now}
                if len(self.until) >= MAX_REFUSED_ADDRESSES:
                    self.until.pop(next(iter(self.until)))
            self.until[address] = until

    def refused_until(self, address: str, now: float) -> float | None:
        end = self.until.get(address)
        return end if end is not None and end > now else None


class AddressLimit:
    """Failures a client address may have in a window (a limit setting's number), counted in
    Redis under "<name>:<address>"; past it, this process refuses the address from memory
    until the window ends (check() costs no database query and no Redis call). Each limit
    has its own counter and its own memory: the API's failed authentications never refuse a
    ping, nor a ping's unknown keys an API request."""

    def __init__(self, name: str, setting: str, what: str) -> None:
        self.name, self.setting, self.what = name, setting, what
        self.refused = RefusedAddresses()

    def per_minute(self) -> int:
        return getattr(app_settings, self.setting)

    def too_many(self, reset: int) -> exceptions.Throttled:
        return exceptions.Throttled(
            wait=reset, detail=f"more than {self.per_minute()} {self.what} a minute from this address."
        )

    def check(self, request) -> None:
        """Raise Throttled (429) when this process saw the address go over its limit in this window."""
        now = time.time()
        end = self.refused.refused_until(client_address(request), now)
        if end is not None:
            raise self.too_many(max(1, math.ceil(end - now)))

    def count(self, request) -> None:
        """Count one failure against the address; raise Throttled (429) once it is over the limit.
        The failure that uses up the window's last one makes check() refuse the next request."""
        address = client_address(request)
        now = time.time()
        counts = counter.hit([f"{self.name}:{address}"], now)
        if counts is None or counts[0] < self.per_minute():
            return
        reset = window_reset(now)
        self.refused.refuse(address, now + reset)
        if counts[0] > self.per_minute():
            raise self.too_many(reset)


# Wrong API keys (CRONFLEET_API_FAILED_AUTH_PER_MINUTE) and pings with an unknown or malformed
# ping key (CRONFLEET_PING_UNKNOWN_PER_MINUTE, api/pings.py), each per client address.
failed_auth = AddressLimit("auth-failed", "API_FAILED_AUTH_PER_MINUTE", "failed authentications")
unknown_pings = AddressLimit("ping-unknown", "PING_UNKNOWN_PER_MINUTE", "pings with an unknown key")


def check_address(request) -> None:
    """Refuse (429) a bearer request from an address this process saw go over its limit of
    failed authentications in this window; costs no database query and no Redis call."""
    failed_auth.check(request)


def count_failure(request) -> None:
    """Count a failed authentication against its address; raise Throttled (429) once it is
    over the limit (the caller answers 401 otherwise)."""
    failed_auth.count(request)
