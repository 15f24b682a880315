"""The chat channel of alert rules: a Slack-compatible incoming webhook (Slack, Mattermost,
Rocket.Chat, Discord's /slack URLs, Microsoft Teams workflows that take Slack's shape). Each
alert is one JSON POST {"text": ...}, through the same HTTP client and SSRF guard as HTTP jobs
and the signed webhooks (every resolved address checked at connect time, no redirects,
bounded time and bytes). Unsigned: an incoming webhook's secret is its URL.
"""

from __future__ import annotations

import ipaddress
import json
import logging

from scheduler_app.conf import app_settings
from scheduler_app.models import Alert, AlertKind
from scheduler_app.targets.http import client as httpclient
from scheduler_app.targets.http import guard as netguard
from scheduler_app.targets.http.perform import UNCALLABLE, uncallable

logger = logging.getLogger(__name__)

CHANNEL = "chat"  # its delivery_log entries' channel
MARKS = {AlertKind.CHECKIN_UP: ":large_green_circle:"}  # every other kind: something went wrong
TEXT_LIMIT = 3000  # characters of text sent (Slack cuts a message's text near 40,000; a chat line should not)


def escape(text: str) -> str:
    """Slack's message escaping: &, < and > are markup in a message's text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def chat_text(alert: Alert) -> str:
    """The chat line: a coloured mark, the kind, tenant/job, then the alert's message (its
    reason first)."""
    mark = MARKS.get(alert.kind, ":red_circle:")
    job = alert.job
    text = f"{mark} *{alert.kind}* {job.tenant.slug}/{job.name}: {alert.message}"
    return escape(text[:TEXT_LIMIT])


def send_chat(alert: Alert, url: str) -> str | None:
    """POST the alert's line to a Slack-compatible incoming webhook; None when it answered 2xx."""
    body = json.dumps({"text": chat_text(alert)}, separators=(",", ":")).encode()
    try:
        response = httpclient.request(
            "POST",
            url,
            headers={"Content-Type": "application/json"},
            body=body,
            timeout=float(app_settings.ALERT_DELIVERY_TIMEOUT_SECONDS),
            max_response_bytes=4096,
            allowed_networks=[ipaddress.ip_network(net) for net in app_settings.HTTP_ALLOWED_NETWORKS],
            user_agent="Cronfleet-Alert/1",
        )
    except (netguard.BlockedTarget, httpclient.HttpTimeout, httpclient.HttpConnectionError, OSError, ValueError) as exc:
        if uncallable(exc):  # the tenant reads this: not which internal names exist
            logger.warning("alert %s: chat hook cannot be called: %s", alert.id, exc)
            return f"{UNCALLABLE}: the chat hook's host cannot be called"
        if isinstance(exc, netguard.BlockedTarget):
            return f"{exc.reason}: {exc.detail}"
        return f"{type(exc).__name__}: {exc}"
    return None if 200 <= response.status < 300 else f"http {response.status}"
