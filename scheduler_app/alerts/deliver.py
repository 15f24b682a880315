"""Delivering the alerts evaluate.py records: by webhook (signed like HTTP jobs, through the
same client and SSRF guard), to a chat's Slack-compatible incoming webhook (chat.py) and by
e-mail (Django's e-mail backend).

Exactly once with any number of beats: each alert is claimed by a compare-and-set on
delivering_until (a lease, lease()); failures are retried with backoff up to
DELIVERY_ATTEMPTS. In a beat, a Deliverer thread hands the sending to a pool of threads, each
on its own database connection, so a slow or hanging receiver never holds up dispatch; the
pool is shared fairly between tenants (fair_pending), so it never holds up another tenant's
alerts either.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import Q

from scheduler_app.alerts import chat
from scheduler_app.alerts.budget import email_budget_exceeded, suppressed_entry
from scheduler_app.alerts.evaluate import check_every
from scheduler_app.alerts.post import post_alert
from scheduler_app.conf import app_settings
from scheduler_app.http import signing
from scheduler_app.http.secrets import tenant_signing_secrets
from scheduler_app.models import Alert, db_now

logger = logging.getLogger(__name__)

DELIVERIES_PER_CHECK = 20
DELIVERY_ATTEMPTS = 5
DELIVERY_LEASE = timedelta(seconds=60)
# A delivery_log entry of an alert whose rule has no webhook, no chat hook and no e-mail address.
NO_CHANNEL = "none"


class Deliverer(threading.Thread):
    """A beat's background thread: when woken (after each of the beat's checks, when a
    delivery ends) and every CRONFLEET_ALERT_CHECK_SECONDS, hands pending alerts to a pool of
    CRONFLEET_ALERT_DELIVERY_THREADS sending threads, tenants in turn and at most
    CRONFLEET_ALERT_DELIVERIES_PER_TENANT in flight for one tenant (fair_pending()): a
    tenant's hanging receiver holds its own share of the threads, never the others'. At most
    about every CRONFLEET_ALERT_CHECK_SECONDS it then does `chores` (the roll-ups: long statements at
    scale that must not hold up a turn). Any error is logged and the next pass tried; the
    thread ends only when stopped."""

    def __init__(self, chores: Callable[[], object] | None = None) -> None:
        super().__init__(name="alert-deliverer", daemon=True)
        self.stopping = threading.Event()
        self.woken = threading.Event()
        self.chores = chores
        self.threads = app_settings.ALERT_DELIVERY_THREADS
        self.per_tenant = app_settings.ALERT_DELIVERIES_PER_TENANT
        self.pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="alert-send")
        self.lock = threading.Lock()
        self.in_flight: dict[int, int] = {}  # alert id -> tenant id, handed to the pool and not done
        self.chores_at = float("-inf")  # monotonic time chores last ran

    def wake(self) -> None:
        self.woken.set()

    def stop(self, timeout: float) -> None:
        """Ask the thread to end, hand out nothing more and wait for it up to `timeout`.
        Alerts still being sent then are sent again by some beat once their lease is over
        (their receiver may see them twice, as with any at-least-once delivery)."""
        self.stopping.set()
        self.woken.set()
        self.join(timeout)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.woken.wait(check_every())
                self.woken.clear()
                if self.stopping.is_set():
                    break
                self.deliver_once()
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
            connection.close()  # this thread's own connection

    def deliver_once(self) -> int:
        """Hand out what the free sending threads can take; return how many were handed out."""
        try:
            close_old_connections()
            handed = self.hand_out(db_now())
            # Woken by each ended delivery too: the roll-ups keep to about the check's pace.
            due = time.monotonic() - self.chores_at >= check_every() / 2
            if self.chores is not None and due and not self.stopping.is_set():
                self.chores_at = time.monotonic()
                self.chores()
            return handed
        except DatabaseError as exc:
            logger.warning("alert delivery: %s: %s; trying again on a fresh connection", type(exc).__name__, exc)
            connection.close()
        except Exception:  # noqa: BLE001 - a dead delivery thread would silently stop every alert
            logger.exception("alert delivery failed; trying again at the next pass")
        return 0

    def hand_out(self, now: datetime) -> int:
        with self.lock:
            busy = Counter(self.in_flight.values())
            skip = set(self.in_flight)
            free = self.threads - len(self.in_flight)
        if free <= 0:
            return 0
        picked = fair_pending(now, limit=free, per_tenant=self.per_tenant, busy=busy, skip=skip)
        for alert_id, tenant_id in picked:
            with self.lock:
                self.in_flight[alert_id] = tenant_id
            self.pool.submit(self.send, alert_id)
        return len(picked)

    def send(self, alert_id: int) -> None:
        """On a sending thread (its own database connection): one alert, then wake the
        deliverer to fill the freed slot."""
        try:
            close_old_connections()
            if not self.stopping.is_set():
                deliver(alert_id, db_now())
        except DatabaseError as exc:
            logger.warning("alert %s: %s: %s; its lease lets it be tried again", alert_id, type(exc).__name__, exc)
            connection.close()
        except Exception:  # noqa: BLE001 - the slot must be freed whatever the failure
            logger.exception("alert %s: delivery failed; its lease lets it be tried again", alert_id)
        finally:
            close_old_connections()
            with self.lock:
                self.in_flight.pop(alert_id, None)
            self.woken.set()


def lease() -> timedelta:
    """How long a claim on an alert holds: longer than a webhook may take to answer."""
    return DELIVERY_LEASE + timedelta(seconds=app_settings.ALERT_DELIVERY_TIMEOUT_SECONDS)


def delivery_status(alert: Alert) -> str:
    """delivered, no_channel (its rule had no webhook, chat hook or e-mail: sent nowhere),
    suppressed (over its tenant's budget: never sent; the reason is in its delivery_log),
    pending (to be tried, or being tried) or failed (gave up)."""
    if alert.delivered_at is not None:
        return "delivered"
    if alert.next_delivery_at is None:
        return "no_channel" if had_no_channel(alert) else "suppressed"
    return "failed" if alert.delivery_attempts >= DELIVERY_ATTEMPTS else "pending"


def had_no_channel(alert: Alert) -> bool:
    """Whether the alert's last delivery found no channel on its rule (no_channel_entry())."""
    log = alert.delivery_log or []
    return bool(log) and log[-1].get("channel") == NO_CHANNEL


def no_channel_entry(now: datetime) -> dict:
    """The delivery_log entry of an alert whose rule had neither a webhook nor an e-mail
    address: nothing sent, and nothing to retry (delivered_at and next_delivery_at stay NULL)."""
    return {"channel": NO_CHANNEL, "at": now.isoformat(), "error": None, "note": "no channel"}


def where_sent(alert: Alert) -> str:
    """Where the alert's last attempt went: 'webhook HOST', 'Slack hook at HOST', 'N e-mails',
    several of these, or 'no channel' ('' when it was never tried)."""
    log = alert.delivery_log or []
    if not log:
        return ""
    if log[-1].get("channel") == NO_CHANNEL:
        return "no channel"
    last_at = log[-1].get("at")
    parts = []
    for entry in log:
        if entry.get("at") != last_at or entry.get("suppressed"):
            continue
        if entry.get("channel") == "webhook":
            parts.append(f"webhook {entry['host']}" if entry.get("host") else "webhook")
        elif entry.get("channel") == chat.CHANNEL:
            parts.append(f"Slack hook at {entry['host']}" if entry.get("host") else "Slack hook")
        elif entry.get("channel") == "email":
            count = int(entry.get("recipients") or 0)
            parts.append(f"{count} e-mail" + ("" if count == 1 else "s") if count else "e-mail")
    return ", ".join(parts)


def fair_pending(
    now: datetime, *, limit: int, per_tenant: int, busy: Counter | None = None, skip: set[int] | None = None
) -> list[tuple[int, int]]:
    """(alert id, tenant id) of up to `limit` alerts due at `now`, tenants in turn (every
    tenant's oldest first, then every tenant's second...), at most `per_tenant` of a tenant
    less the `busy` ones it has in flight; alerts in `skip` or claimed by a beat are left."""
    busy, skip = busy or Counter(), skip or set()
    with connection.cursor() as cursor:
        cursor.execute(FAIR_PENDING, {"now": now, "attempts": DELIVERY_ATTEMPTS, "per_tenant": per_tenant})
        rows = cursor.fetchall()
    # `skip` (handed to a sending thread, not claimed yet: a few) is left out here, in SQL that
    # SQLite runs too; a skipped alert keeps its place, so its tenant gets no more than its share.
    picked = [
        (alert_id, tenant_id)
        for alert_id, tenant_id, place in rows
        if alert_id not in skip and place + busy[tenant_id] <= per_tenant
    ]
    return picked[:limit]


# Due alerts numbered within their tenant by age, ordered by that number: round-robin over
# tenants. Claimed alerts (delivering_until ahead) are being sent by some beat.
FAIR_PENDING = """
SELECT id, tenant_id, place FROM (
    SELECT id, tenant_id, next_delivery_at,
           row_number() OVER (PARTITION BY tenant_id ORDER BY next_delivery_at, id) AS place
    FROM scheduler_app_alert
    WHERE delivered_at IS NULL AND next_delivery_at <= %(now)s AND delivery_attempts < %(attempts)s
      AND (delivering_until IS NULL OR delivering_until < %(now)s)
) AS due
WHERE place <= %(per_tenant)s
ORDER BY place, next_delivery_at, id
"""


def deliver_pending(
    now: datetime,
    *,
    limit: int = DELIVERIES_PER_CHECK,
    stop: threading.Event | None = None,
    clock: Callable[[], datetime] | None = None,
) -> int:
    """Send, one after another, up to `limit` undelivered alerts whose turn has come at
    `now`, tenants in turn (fair_pending); return how many were delivered. For a beat without
    a Deliverer (`runbeat --once`, tests). Each is sent at `now`, or with `clock`, at the time
    clock() says then. Stops between two alerts once `stop` is set."""
    delivered = 0
    for alert_id, _tenant in fair_pending(now, limit=limit, per_tenant=app_settings.ALERT_DELIVERIES_PER_TENANT):
        if stop is not None and stop.is_set():
            break
        delivered += deliver(alert_id, now if clock is None else clock())
    return delivered


def deliver(alert_id: int, now: datetime) -> bool:
    """Claim the alert (compare-and-set on delivering_until), send it on every channel of its
    rule, and record the outcome. False: another beat has it, or a channel failed. An e-mail
    over the tenant's hourly budget is not sent (logged as suppressed); an alert whose only
    channel that was is recorded as suppressed (no next attempt); one whose rule has no webhook,
    no chat hook and no e-mail address as sent nowhere (no_channel_entry(), never delivered)."""
    claimed = (
        Alert.objects.filter(id=alert_id, delivered_at__isnull=True, next_delivery_at__isnull=False)
        .filter(Q(delivering_until__isnull=True) | Q(delivering_until__lt=now))
        .update(delivering_until=now + lease())
    )
    if not claimed:
        return False
    alert = Alert.objects.select_related("job__tenant", "rule").get(id=alert_id)
    rule = alert.rule
    log: list[dict[str, object]]
    log, ok, sent = [], True, False
    if rule is None or not (rule.webhook_url or rule.chat_url or rule.emails):
        # Nowhere to send it: recorded as such, never as delivered, and not retried.
        Alert.objects.filter(id=alert_id).update(
            delivery_attempts=alert.delivery_attempts + 1,
            delivering_until=None,
            next_delivery_at=None,
            delivery_log=[*alert.delivery_log, no_channel_entry(now)][-20:],
        )
        return False
    if rule.webhook_url:
        error = send_webhook(alert, rule.webhook_url, now)
        host = urlsplit(rule.webhook_url).hostname or ""
        log.append({"channel": "webhook", "at": now.isoformat(), "error": error, "host": host})
        ok &= error is None
        sent = True
    if rule.chat_url:
        error = chat.send_chat(alert, rule.chat_url)
        host = urlsplit(rule.chat_url).hostname or ""
        log.append({"channel": chat.CHANNEL, "at": now.isoformat(), "error": error, "host": host})
        ok &= error is None
        sent = True
    if rule.emails:
        over = email_budget_exceeded(alert.tenant_id, now, len(rule.emails))
        if over:
            log.append(suppressed_entry("email", now, over))
        else:
            error = send_email(alert, rule.emails)
            log.append({"channel": "email", "at": now.isoformat(), "error": error, "recipients": len(rule.emails)})
            ok &= error is None
            sent = True
    attempts = alert.delivery_attempts + 1
    backoff = timedelta(seconds=30 * 2 ** (attempts - 1))
    suppressed = ok and not sent and bool(log)  # every channel it has was over budget
    Alert.objects.filter(id=alert_id).update(
        delivered_at=now if ok and not suppressed else None,
        delivery_attempts=attempts,
        delivering_until=None,
        next_delivery_at=None if ok else now + backoff,
        delivery_log=[*alert.delivery_log, *log][-20:],
    )
    return ok and not suppressed


def payload(alert: Alert) -> dict:
    job = alert.job
    return {
        "type": "cronfleet.alert",
        "id": alert.dedup_key,
        "kind": alert.kind,
        "message": alert.message,
        "tenant": job.tenant.slug,
        "job": job.name,
        "job_id": job.id,
        "run_id": alert.run_id,
        "raised_at": alert.raised_at.isoformat(),
        "detail": alert.detail,
    }


def send_webhook(alert: Alert, url: str, now: datetime) -> str | None:
    """POST the alert as JSON, signed with the tenant's secrets; None when it answered 2xx."""
    body = json.dumps(payload(alert), separators=(",", ":")).encode()
    secrets = [signing.parse_secret(s) for s in tenant_signing_secrets(alert.job.tenant, now)]
    signed = signing.headers(
        secrets,
        f"alert-{alert.id}",
        int(now.timestamp()),
        body,
        attempt=alert.delivery_attempts + 1,
        scheduled_at=alert.raised_at.isoformat(),
    )
    return post_alert(alert, url, body, hook="webhook", signed_headers=signed)


def send_email(alert: Alert, addresses: list[str]) -> str | None:
    try:
        send_mail(
            f"[Cronfleet] {alert.kind}: {alert.job}",
            f"{alert.message}\n\n{json.dumps(payload(alert), indent=2)}",
            settings.DEFAULT_FROM_EMAIL,
            addresses,
            fail_silently=False,
        )
    except Exception as exc:  # noqa: BLE001 - any backend's failure is a failed delivery, retried later
        return f"{type(exc).__name__}: {exc}"
    return None
