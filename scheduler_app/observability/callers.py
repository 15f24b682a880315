"""Where a web request comes from, read one way for every reader: the API's rate limits
(api/throttling.py) and the admin's login throttle (admin/login.py)."""

from __future__ import annotations

from scheduler_app.conf import app_settings


def client_address(request) -> str:
    """The caller's address: REMOTE_ADDR, or behind CRONFLEET_TRUSTED_PROXIES proxies the
    address the outermost of them saw (the entry it appended to X-Forwarded-For)."""
    proxies = app_settings.TRUSTED_PROXIES
    if proxies:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR", "")
