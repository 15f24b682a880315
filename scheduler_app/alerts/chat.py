"""The chat channel of alert rules: a Slack-compatible incoming webhook (Slack, Mattermost,
Rocket.Chat, Discord's /slack URLs, Microsoft Teams workflows that take Slack's shape). Each
alert is one JSON POST {"text": ...}, through the same HTTP client and SSRF guard as HTTP jobs
and the signed webhooks (every resolved address checked at connect time, no redirects,
bounded time and bytes). Unsigned: an incoming webhook's secret is its URL.
"""

from __future__ import annotations

import json

from scheduler_app.alerts.post import post_alert
from scheduler_app.models import Alert, AlertKind

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
    return post_alert(alert, url, body, hook="chat hook")
