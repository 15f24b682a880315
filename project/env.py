"""Typed readers of the environment for the settings. Each fails loudly: a malformed value
raises ImproperlyConfigured naming the variable, instead of silently falling back to a default.
"""

import json
import os

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str) -> str:
    """The variable's value; unset and empty both mean the default."""
    return os.environ.get(name) or default


def env_json_object(name: str, what: str) -> dict:
    """The variable's JSON object (unset or empty: {}); ImproperlyConfigured naming it otherwise."""
    try:
        value = json.loads(env_str(name, "{}"))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object of {what}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    return _env_number(name, default, int, "an integer", minimum)


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    return _env_number(name, default, float, "a number", minimum)


def _env_number(name: str, default, kind: type, what: str, minimum):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]
