"""What one tenant's alerts may cost (docs/alerts.md): the shortest cool-down, and per tenant
per hour the alerts and the e-mails (one per address) sent. Over a budget an alert or its
e-mail is recorded as suppressed, with the reason, and not sent.

The budgets are read from the alerts already recorded (no counter of their own), so two beats
deciding at the same instant may each let one more through: a budget is exact to within the
deliveries in flight (CRONFLEET_ALERT_DELIVERIES_PER_TENANT per beat).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection

from scheduler_app.conf import app_settings
from scheduler_app.models import Alert

HOUR = timedelta(hours=1)
# A delivery_log entry of an alert recorded over its tenant's alert budget (never sent).
BUDGET_CHANNEL = "budget"


def json_in_sql() -> bool:
    """Whether the database reads the delivery logs itself (PostgreSQL's jsonb); the embedded
    SQLite demo has no JSON containment, so its few alerts are read here instead."""
    return connection.vendor == "postgresql"


def min_cooldown() -> int:
    """The shortest cool-down a rule may have: refused below it at save, and rules saved
    before it was raised are held to it when evaluated."""
    return app_settings.ALERT_MIN_COOLDOWN_SECONDS


def suppressed_entry(channel: str, now: datetime, reason: str) -> dict:
    """The delivery_log entry of something not sent; `error` carries the reason for the
    readers that show only the last error."""
    return {"channel": channel, "at": now.isoformat(), "error": f"suppressed: {reason}", "suppressed": reason}


def alert_budget_exceeded(tenant_id: int, now: datetime) -> str | None:
    """Why a new alert of the tenant's must not be sent (None: it may be): the alerts it
    had recorded for sending in the hour before `now`."""
    budget = app_settings.ALERT_TENANT_ALERTS_PER_HOUR
    hour = Alert.objects.filter(tenant_id=tenant_id, raised_at__gt=now - HOUR, raised_at__lte=now)
    if json_in_sql():
        recorded = hour.exclude(delivery_log__contains=[{"channel": BUDGET_CHANNEL}]).count()
    else:
        recorded = sum(
            1
            for log in hour.values_list("delivery_log", flat=True)
            if not any(entry.get("channel") == BUDGET_CHANNEL for entry in log or [])
        )
    if recorded < budget:
        return None
    return f"the tenant's budget of {budget} alerts per hour is spent (CRONFLEET_ALERT_TENANT_ALERTS_PER_HOUR)"


def email_budget_exceeded(tenant_id: int, now: datetime, addresses: int) -> str | None:
    """Why the tenant may not mail `addresses` more addresses now (None: it may): the e-mails
    its alerts sent in the hour before `now`, one per address."""
    budget = app_settings.ALERT_TENANT_EMAILS_PER_HOUR
    if json_in_sql():
        with connection.cursor() as cursor:
            cursor.execute(EMAILS_SENT, {"tenant": tenant_id, "since": now - HOUR, "oldest": now - 2 * HOUR})
            sent = cursor.fetchone()[0]
    else:
        sent = emails_sent_in_python(tenant_id, now)
    if sent + addresses <= budget:
        return None
    return (
        f"the tenant's budget of {budget} e-mails per hour is spent ({sent} sent; "
        f"CRONFLEET_ALERT_TENANT_EMAILS_PER_HOUR)"
    )


# The e-mails sent since %(since)s: the `recipients` of the e-mail entries without an error
# (only those entries have it, and the CASE casts only theirs).
# An alert is sent within minutes of being raised (five attempts with backoff), so alerts
# raised before %(oldest)s are not looked at (alert_tenant_recent_idx).
EMAILS_SENT = """
SELECT COALESCE(SUM((entry ->> 'recipients')::int), 0)
FROM scheduler_app_alert AS alert, jsonb_array_elements(alert.delivery_log) AS entry
WHERE alert.tenant_id = %(tenant)s AND alert.raised_at > %(oldest)s
  AND entry ->> 'channel' = 'email' AND entry ->> 'error' IS NULL
  AND CASE WHEN entry ? 'recipients' THEN (entry ->> 'at')::timestamptz > %(since)s ELSE false END
"""


def emails_sent_in_python(tenant_id: int, now: datetime) -> int:
    """EMAILS_SENT for the embedded SQLite demo (no jsonb functions there), over its few alerts."""
    logs = Alert.objects.filter(tenant_id=tenant_id, raised_at__gt=now - 2 * HOUR).values_list(
        "delivery_log", flat=True
    )
    return sum(
        int(entry["recipients"])
        for log in logs
        for entry in log or []
        if entry.get("channel") == "email"
        and entry.get("error") is None
        and "recipients" in entry
        and datetime.fromisoformat(entry["at"]) > now - HOUR
    )
