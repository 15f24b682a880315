"""The admin's login form, throttled: after CRONFLEET_ADMIN_LOGIN_FAILURES failed logins for one
username from one address within CRONFLEET_ADMIN_LOGIN_WINDOW_SECONDS, that username's logins
from that address are refused with a message saying when to try again, the right password
included, and without checking it (a refused attempt is not counted, so the refusal ends once
the oldest of those failures is a window old).

Failures are counted per (username, address) in a sliding window: a sorted set of failure
times in Redis at CRONFLEET_RATE_LIMIT_REDIS_URL, shared by every web process, or without it
(the SQLite first run) in this process's memory. When Redis does not answer, logins go
through unthrottled with a logged warning, as the API's limits do (scheduler_app/api/throttling.py):
a Redis outage must not lock every operator out. Usernames are kept only as digests.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import os
import threading
import time
from collections import OrderedDict

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError

from scheduler_app.conf import app_settings
from scheduler_app.observability.callers import client_address
from scheduler_app.redisclient import client_from_url

logger = logging.getLogger(__name__)

REDIS_TIMEOUT_SECONDS = 0.5
# (username, address) pairs one process remembers without Redis; the oldest is forgotten first.
MAX_REMEMBERED = 10_000


def attempt_key(username: str, address: str) -> str:
    digest = hashlib.sha256(f"{username.strip().lower()}\0{address}".encode()).hexdigest()[:32]
    return f"cronfleet:admin-login-failed:{digest}"


class MemoryFailures:
    """Failure times per key in this process (no Redis configured)."""

    errors: tuple[type[Exception], ...] = ()  # what its calls raise when the store does not answer

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: OrderedDict[str, list[float]] = OrderedDict()

    def recent(self, key: str, now: float, window: int) -> list[float]:
        with self.lock:
            kept = [at for at in self.times.get(key, []) if at > now - window]
            if kept:
                self.times[key] = kept
            else:
                self.times.pop(key, None)
            return kept

    def record(self, key: str, now: float, window: int) -> None:
        with self.lock:
            self.times[key] = [at for at in self.times.get(key, []) if at > now - window] + [now]
            self.times.move_to_end(key)
            while len(self.times) > MAX_REMEMBERED:
                self.times.popitem(last=False)


class RedisFailures:
    """Failure times per key in a Redis sorted set (score and member: the time)."""

    def __init__(self, url: str) -> None:
        import redis  # here: not every process that loads the admin pays for the Redis client

        self.errors = (redis.RedisError,)
        self.client = client_from_url(
            url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
        )
        self.members = itertools.count()

    def recent(self, key: str, now: float, window: int) -> list[float]:
        return [score for _, score in self.client.zrangebyscore(key, f"({now - window}", "+inf", withscores=True)]

    def record(self, key: str, now: float, window: int) -> None:
        with self.client.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, "-inf", now - window)
            pipe.zadd(key, {f"{now!r}:{os.getpid()}:{next(self.members)}": now})
            pipe.expire(key, window + 1)
            pipe.execute()


_memory = MemoryFailures()
_redis: dict[str, RedisFailures] = {}


def failures():
    url = app_settings.RATE_LIMIT_REDIS_URL
    if not url:
        return _memory
    if url not in _redis:
        _redis[url] = RedisFailures(url)
    return _redis[url]


def refused_for(key: str, now: float) -> float | None:
    """Seconds until `key` may try again, or None when it may now."""
    limit, window = app_settings.ADMIN_LOGIN_FAILURES, app_settings.ADMIN_LOGIN_WINDOW_SECONDS
    store = failures()
    try:
        recent = sorted(store.recent(key, now, window))
    except store.errors as exc:
        logger.warning("admin login throttle: Redis did not answer (%s); login not throttled", exc)
        return None
    if len(recent) < limit:
        return None
    # Allowed again when fewer than `limit` failures are left in the window.
    return max(recent[len(recent) - limit] + window - now, 1.0)


def record_failure(key: str, now: float) -> None:
    store = failures()
    try:
        store.record(key, now, app_settings.ADMIN_LOGIN_WINDOW_SECONDS)
    except store.errors as exc:
        logger.warning("admin login throttle: Redis did not answer (%s); failure not counted", exc)


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    """The admin's login form, refusing a (username, address) over its failure budget."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": "Too many failed logins for this username from your address: try again in %(minutes)s minute(s).",
    }

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        address = client_address(self.request) if self.request is not None else ""
        key, now = attempt_key(username, address), time.time()
        wait = refused_for(key, now)
        if wait is not None:
            logger.warning("admin login for %r from %s refused: too many failures", username, address)
            raise ValidationError(
                self.error_messages["throttled"], code="throttled", params={"minutes": math.ceil(wait / 60)}
            )
        try:
            return super().clean()
        except ValidationError:
            record_failure(key, now)
            raise


admin.site.login_form = ThrottledAdminAuthenticationForm
