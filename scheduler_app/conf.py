"""Cronfleet's settings: every `CRONFLEET_*` name with its default, read through one accessor.

A host project sets only what it wants changed (docs/settings.md lists them all); nothing is
required. Code reads `app_settings.LEASE_SECONDS`, which is Django's `CRONFLEET_LEASE_SECONDS`
when the project sets it (override_settings included) and the default below when it does not.
Cronfleet's own deployment (project/settings.py) reads the environment and sets the same names.

`problems()` holds the checks between settings (a heartbeat within half the lease, ...): the
app's system checks (checks.py) run them, and so does project/settings.py at start-up. The
project's settings module imports this one while it loads: nothing at the top may read
Django's settings (django.core.signals does not).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from django.core.signals import setting_changed

PREFIX = "CRONFLEET_"


class Derived:
    """A default computed from other settings (read through the accessor, so overrides count)."""

    def __init__(self, compute: Callable[[AppSettings], Any], kind: type | tuple[type, ...], text: str) -> None:
        self.compute, self.kind, self.text = compute, kind, text


def _redis_broker_url(conf: AppSettings) -> str:
    url = celery_broker_url()
    return url if url.startswith(("redis://", "rediss://", "sentinel://")) else ""


def _max_job_timeout() -> int:
    """3600 s, or less where a Redis broker's visibility timeout (kombu's default: 3600 s) would
    hand a message whose run is still within its hard limit (timeout + 30 s) to another worker."""
    visibility = redis_visibility_timeout()
    return 3600 if visibility is None else max(1, min(3600, visibility - 60))


DEFAULTS: dict[str, Any] = {
    # --- what jobs may run -------------------------------------------------------------
    "ALLOWED_TASKS": ["scheduler_app.echo", "scheduler_app.fail", "scheduler_app.sleep"],
    "COMMANDS": {},
    "COMMAND_CWD": str(Path(tempfile.gettempdir()) / "cronfleet-command-runs"),
    "COMMAND_USER": "",
    "COMMAND_MAX_DISK_BYTES": 256 * 1024 * 1024,
    "SQL": {},
    "HTTP_ALLOWED_NETWORKS": [],
    "HTTP_MAX_RESPONSE_BYTES": 65536,
    "HTTP_IN_FLIGHT": 1000,
    "HTTP_IN_FLIGHT_PER_HOST": Derived(lambda conf: max(1, conf.HTTP_IN_FLIGHT // 2), int, "HTTP_IN_FLIGHT // 2"),
    "ENCRYPTION_KEYS": [],
    "RESULT_MAX_BYTES": 8192,
    "MAX_JOB_TIMEOUT_SECONDS": Derived(
        lambda conf: _max_job_timeout(), int, "3600, or less where a Redis broker's visibility timeout needs it"
    ),
    # --- queues and the broker ---------------------------------------------------------
    "QUEUE": "cronfleet",
    "QUEUES": [],
    "RABBITMQ_QUEUE_TYPE": "classic",
    "QUEUE_MAX_PRIORITY": Derived(
        lambda conf: 9 if conf.RABBITMQ_QUEUE_TYPE == "classic" else None,
        (int, type(None)),
        "9 for classic queues, None for quorum ones",
    ),
    "RABBITMQ_CONFIRM_PUBLISH": True,
    "SENTINEL_MASTER": "",
    "SENTINEL_TIMEOUT_SECONDS": 2.0,
    "EVENT_FLUSH_SECONDS": 0.1,
    # --- the beat -----------------------------------------------------------------------
    "BATCH_SIZE": 1000,
    "JOB_VACUUM_EVERY": 100_000,
    "LEDGER_ANALYZE_EVERY": 50_000,
    "MAX_SLEEP_SECONDS": 5,
    "MISFIRE_GRACE_SECONDS": 60,
    "DISPATCH_TIMEOUT_SECONDS": 300,
    "REPUBLISH_IDLE_SECONDS": 15,
    "UNCONSUMED_EXPIRE_SECONDS": 3600,
    "QUEUE_HIGH_WATER": 5000,
    "MANUAL_RUNS_IN_FLIGHT": 100,
    "MANUAL_RUNS_PER_HOUR": 1000,
    "RUN_BATCH_SIZE": 100,
    "BATCH_QUEUES": [],
    "BATCH_MAX_TIMEOUT_SECONDS": 60,
    # --- the worker ---------------------------------------------------------------------
    "LEASE_SECONDS": 30,
    "HEARTBEAT_SECONDS": 10,
    "PREPARED_STATEMENTS": True,
    "END_SYNCHRONOUS_COMMIT": "off",
    # --- schedules as code --------------------------------------------------------------
    "SCHEDULES_FILE": "",
    "SCHEDULES_MAX_FILE_BYTES": 8 * 1024 * 1024,
    "MANAGED_JOBS_READ_ONLY": False,
    # --- retention ----------------------------------------------------------------------
    "RETENTION_DAYS": 30,
    "RETENTION_FAILED_DAYS": 90,
    "RETENTION_KEEP_LAST": 0,
    "RETENTION_AUDIT_DAYS": 365,
    "RETENTION_IN_BEAT": True,
    "RETENTION_BATCH_SIZE": 5000,
    "RETENTION_BUSY_SECONDS": 10,
    "RETENTION_CHECK_SECONDS": 60,
    "RETENTION_RESCAN_SECONDS": 3600,
    # --- alerts -------------------------------------------------------------------------
    "ALERT_CHECK_SECONDS": 10,
    "ALERT_DELIVERY_TIMEOUT_SECONDS": 5,
    "ALERT_DELIVERY_THREADS": 8,
    "ALERT_DELIVERIES_PER_TENANT": 2,
    "ALERT_MIN_COOLDOWN_SECONDS": 60,
    "ALERT_MAX_EMAILS_PER_RULE": 10,
    "ALERT_TENANT_ALERTS_PER_HOUR": 120,
    "ALERT_TENANT_EMAILS_PER_HOUR": 200,
    # --- time-data impact (docs/time-data.md) ---------------------------------------------
    "TIME_DATA_HORIZON_DAYS": 30,
    "TIME_DATA_STARTUP_JOBS": 10000,
    # --- pauses ---------------------------------------------------------------------------
    "BULK_PAUSE_APPROVAL_OVER": 100,
    # --- the API, pings and the admin's login ---------------------------------------------
    "API_MAX_BODY_BYTES": 256 * 1024,
    "MAX_API_KEYS_PER_TENANT": 20,
    "API_REQUESTS_PER_MINUTE": 600,
    "API_TENANT_REQUESTS_PER_MINUTE": 1200,
    "API_FAILED_AUTH_PER_MINUTE": 60,
    "TRUSTED_PROXIES": 0,
    "RATE_LIMIT_REDIS_URL": Derived(_redis_broker_url, str, "the Celery broker's URL when it is Redis, else off"),
    "RATE_LIMIT_RETRY_SECONDS": 5,
    "PING_BASE_URL": "http://localhost:8000",
    "PING_REQUESTS_PER_MINUTE": 60,
    "PING_UNKNOWN_PER_MINUTE": 60,
    "PING_OWN_RUNS_PER_HOUR": 60,
    "ADMIN_LOGIN_FAILURES": 10,
    "ADMIN_LOGIN_WINDOW_SECONDS": 900,
    # --- cells and observability --------------------------------------------------------
    "CELL": "",
    "TENANT_DOCUMENT_KEY": "",
    "METRICS_TENANT_LABELS": False,
    "METRICS_ADDRESS": "0.0.0.0",
    "METRICS_TOKEN": "",
    "FORECAST_TARGET_LAG_SECONDS": 30.0,
    "FORECAST_WORKER_CONCURRENCY": 8,
    "FORECAST_DEFAULT_SECONDS": 1.0,
    "FORECAST_CACHE_SECONDS": 5.0,
}

CHOICES = {
    "RABBITMQ_QUEUE_TYPE": ("classic", "quorum"),
    "END_SYNCHRONOUS_COMMIT": ("on", "off", "local", "remote_write", "remote_apply"),
}
MINIMUMS = {
    "PING_REQUESTS_PER_MINUTE": 1,
    "PING_UNKNOWN_PER_MINUTE": 1,
    "PING_OWN_RUNS_PER_HOUR": 0,  # 0: pings only close fires, they record no run of their own
    "MANUAL_RUNS_PER_HOUR": 0,  # 0: unbounded
    "BULK_PAUSE_APPROVAL_OVER": 0,  # 0: every bulk pause of a job or more waits for a second person
}


def kind_of(name: str) -> type | tuple[type, ...]:
    """The type a setting's value must have (an int is accepted where a float is)."""
    default = DEFAULTS[name]
    if isinstance(default, Derived):
        return default.kind
    if isinstance(default, bool):
        return bool
    if isinstance(default, float):
        return (int, float)
    if isinstance(default, list):
        return (list, tuple)
    return type(default)


class AppSettings:
    """`app_settings.NAME`: Django's CRONFLEET_NAME if set, else its default.

    A plain value is kept once read (a webhook run reads several; Django's settings object
    is slow to ask), and forgotten whenever Django says a setting changed (override_settings
    and pytest-django's `settings` fixture say so). A derived value is worked out anew each
    time: it may read the Celery app's configuration, which says nothing when it changes."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"{PREFIX}{name} is not a Cronfleet setting")
        from django.conf import settings  # here: project/settings.py imports this module while it loads

        value = getattr(settings, PREFIX + name, DEFAULTS[name])
        if isinstance(value, Derived):
            return value.compute(self)
        self.__dict__[name] = value  # found without __getattr__ from now on
        return value

    def forget(self, **kwargs) -> None:
        """Read every setting anew (a receiver of Django's setting_changed)."""
        self.__dict__.clear()


app_settings = AppSettings()
setting_changed.connect(app_settings.forget)


def celery_broker_url() -> str:
    """The broker the host's Celery app publishes to (its conf, whatever namespace it loaded)."""
    from celery import current_app  # here: the host's Celery app is made after its settings load

    return current_app.conf.broker_url or ""


def broker_transport_options() -> dict:
    from celery import current_app  # here: as in celery_broker_url

    return current_app.conf.broker_transport_options or {}


def redis_visibility_timeout() -> int | None:
    """The Redis broker's visibility timeout (kombu's 3600 s unless set); None for other brokers."""
    if not celery_broker_url().startswith(("redis://", "rediss://", "sentinel://", "unix://")):
        return None
    return int(broker_transport_options().get("visibility_timeout", 3600))


def problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, what to do) for each value that is out of range or disagrees with another.
    `values` maps short names (LEASE_SECONDS) to values, plus VISIBILITY_TIMEOUT (the Redis
    broker's, or None)."""
    found = []
    for name, choices in CHOICES.items():
        if values[name] not in choices:
            found.append((PREFIX + name, f"must be one of {', '.join(choices)}, got {values[name]!r}"))
    for name, minimum in MINIMUMS.items():
        if values[name] < minimum:
            found.append((PREFIX + name, f"must be at least {minimum}, got {values[name]!r}"))
    if values["HEARTBEAT_SECONDS"] * 2 > values["LEASE_SECONDS"]:
        found.append(
            (
                PREFIX + "HEARTBEAT_SECONDS",
                f"must be at most half of {PREFIX}LEASE_SECONDS "
                f"({values['HEARTBEAT_SECONDS']} and {values['LEASE_SECONDS']})",
            )
        )
    if 0 < values["RETENTION_FAILED_DAYS"] < values["RETENTION_DAYS"]:
        found.append(
            (
                PREFIX + "RETENTION_FAILED_DAYS",
                f"must be at least {PREFIX}RETENTION_DAYS (or 0: failed and dead runs kept forever)",
            )
        )
    visibility = values.get("VISIBILITY_TIMEOUT")
    if visibility is not None and values["MAX_JOB_TIMEOUT_SECONDS"] + 30 >= visibility:
        found.append(
            (
                PREFIX + "MAX_JOB_TIMEOUT_SECONDS",
                f"+ 30 ({values['MAX_JOB_TIMEOUT_SECONDS'] + 30}) must stay below the broker's visibility "
                f"timeout ({visibility}), or Redis hands a run's message to a second worker: lower it, or "
                "raise visibility_timeout in the Celery app's broker_transport_options "
                "(CELERY_VISIBILITY_TIMEOUT in Cronfleet's own deployment)",
            )
        )
    if 0 < len(values["TENANT_DOCUMENT_KEY"]) < 32:
        found.append(
            (
                PREFIX + "TENANT_DOCUMENT_KEY",
                f"must be at least 32 characters (a random string the cells share), got {len(values['TENANT_DOCUMENT_KEY'])}",
            )
        )
    url = values["RATE_LIMIT_REDIS_URL"]
    if url and not url.startswith(("redis://", "rediss://", "unix://", "sentinel://")):
        found.append((PREFIX + "RATE_LIMIT_REDIS_URL", "must be a redis://, rediss://, unix:// or sentinel:// URL"))
    return found


def current_values() -> dict:
    values = {name: getattr(app_settings, name) for name in DEFAULTS}
    values["VISIBILITY_TIMEOUT"] = redis_visibility_timeout()
    return values


def setting_errors() -> list[tuple[str, str]]:
    """(setting, message) for every Cronfleet setting the project sets wrongly."""
    from django.conf import settings  # here: as in AppSettings

    found = []
    for name in DEFAULTS:
        if hasattr(settings, PREFIX + name):
            value, kind = getattr(settings, PREFIX + name), kind_of(name)
            kinds = kind if isinstance(kind, tuple) else (kind,)
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                names = " or ".join(k.__name__ for k in kinds)
                found.append((PREFIX + name, f"must be {'an' if names[0] in 'aeiou' else 'a'} {names}, got {value!r}"))
    if found:  # the cross-checks compare values, which needs each of the right type
        return found
    return problems(current_values())
