"""One JSON POST of an alert (the signed webhook's, the chat hook's) through the HTTP jobs'
client and SSRF guard: every resolved address checked at connect time, no redirects, bounded
time and bytes; its failure as one line the tenant may read."""

from __future__ import annotations

import ipaddress
import logging
from urllib.parse import urlsplit

from scheduler_app.conf import app_settings
from scheduler_app.http import client as httpclient
from scheduler_app.http import guard as netguard
from scheduler_app.http.call import UNCALLABLE, uncallable
from scheduler_app.models import Alert

logger = logging.getLogger(__name__)


def post_alert(alert: Alert, url: str, body: bytes, *, hook: str, signed_headers: dict | None = None) -> str | None:
    """POST `body` to `url` for `alert`; None when it answered 2xx, else why not. `hook` names
    the receiver in the messages ("webhook", "chat hook")."""
    try:
        response = httpclient.request(
            "POST",
            url,
            headers={"Content-Type": "application/json"},
            signed_headers=signed_headers or {},
            body=body,
            timeout=float(app_settings.ALERT_DELIVERY_TIMEOUT_SECONDS),
            max_response_bytes=4096,
            allowed_networks=[ipaddress.ip_network(net) for net in app_settings.HTTP_ALLOWED_NETWORKS],
            user_agent="Cronfleet-Alert/1",
        )
    except (netguard.BlockedTarget, httpclient.HttpTimeout, httpclient.HttpConnectionError, OSError, ValueError) as exc:
        if uncallable(exc):  # the tenant reads this: not which internal names exist
            # The host only: a chat hook's URL is its secret.
            logger.warning("alert %s: %s at %s cannot be called: %s", alert.id, hook, urlsplit(url).hostname, exc)
            return f"{UNCALLABLE}: the {hook}'s host cannot be called"
        if isinstance(exc, netguard.BlockedTarget):
            return f"{exc.reason}: {exc.detail}"
        return f"{type(exc).__name__}: {exc}"
    return None if 200 <= response.status < 300 else f"http {response.status}"
