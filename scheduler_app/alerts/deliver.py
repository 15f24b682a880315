"""Delivering the alerts evaluate.py records: by webhook (signed like HTTP jobs, through the
same client and SSRF guard) and e-mail (Django's e-mail backend).

Exactly once with any number of beats: each alert is claimed by a compare-and-set on
delivering_until (a lease, lease()); failures are retried with backoff up to
DELIVERY_ATTEMPTS. In a beat, a Deliverer thread does the sending, on its own database
connection, so a slow or hanging receiver never holds up dispatch.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import Q

from scheduler_app.alerts.evaluate import check_every
from scheduler_app.models import Alert, db_now
from scheduler_app.targets.http import client as httpclient
from scheduler_app.targets.http import guard as netguard
from scheduler_app.targets.http import signing
from scheduler_app.targets.http.secrets import tenant_signing_secrets

logger = logging.getLogger(__name__)

DELIVERIES_PER_CHECK = 20
DELIVERY_ATTEMPTS = 5
DELIVERY_LEASE = timedelta(seconds=60)


class Deliverer(threading.Thread):
    """A beat's background thread: sends pending alerts when woken (after each of the beat's
    checks) and every CRONFLEET_ALERT_CHECK_SECONDS, then does `chores` (the roll-ups: long
    statements at scale that must not hold up a turn). Any error is logged and the next pass
    tried; the thread ends only when stopped."""

    def __init__(self, chores: Callable[[], object] | None = None) -> None:
        super().__init__(name="alert-deliverer", daemon=True)
        self.stopping = threading.Event()
        self.woken = threading.Event()
        self.chores = chores

    def wake(self) -> None:
        self.woken.set()

    def stop(self, timeout: float) -> None:
        """Ask the thread to end after the alert it is sending, and wait for it up to
        `timeout`. An alert it is still sending then is sent again by some beat once its lease
        is over (its receiver may see it twice, as with any at-least-once delivery)."""
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
            connection.close()  # this thread's own connection

    def deliver_once(self) -> int:
        try:
            close_old_connections()
            delivered = deliver_pending(db_now(), stop=self.stopping, clock=db_now)
            if self.chores is not None and not self.stopping.is_set():
                self.chores()
            return delivered
        except DatabaseError as exc:
            logger.warning("alert delivery: %s: %s; trying again on a fresh connection", type(exc).__name__, exc)
            connection.close()
        except Exception:  # noqa: BLE001 - a dead delivery thread would silently stop every alert
            logger.exception("alert delivery failed; trying again at the next pass")
        return 0


def lease() -> timedelta:
    """How long a claim on an alert holds: longer than a webhook may take to answer."""
    return DELIVERY_LEASE + timedelta(seconds=settings.CRONFLEET_ALERT_DELIVERY_TIMEOUT_SECONDS)


def delivery_status(alert: Alert) -> str:
    """delivered, pending (to be tried, or being tried) or failed (gave up)."""
    if alert.delivered_at is not None:
        return "delivered"
    return "failed" if alert.delivery_attempts >= DELIVERY_ATTEMPTS else "pending"


def deliver_pending(now: datetime, *, limit: int = DELIVERIES_PER_CHECK, stop: threading.Event | None = None,
                    clock: Callable[[], datetime] | None = None) -> int:
    """Send the undelivered alerts whose turn has come at `now`; return how many were
    delivered. Each is sent at `now`, or with `clock`, at the time clock() says then (a slow
    receiver delays the next ones). Stops between two alerts once `stop` is set."""
    pending = list(Alert.objects.filter(delivered_at__isnull=True, next_delivery_at__lte=now,
                                        delivery_attempts__lt=DELIVERY_ATTEMPTS)
                   .order_by("next_delivery_at").values_list("id", flat=True)[:limit])
    delivered = 0
    for alert_id in pending:
        if stop is not None and stop.is_set():
            break
        delivered += deliver(alert_id, now if clock is None else clock())
    return delivered


def deliver(alert_id: int, now: datetime) -> bool:
    """Claim the alert (compare-and-set on delivering_until), send it on every channel of its
    rule, and record the outcome. False: another beat has it, or a channel failed."""
    claimed = (Alert.objects.filter(id=alert_id, delivered_at__isnull=True)
               .filter(Q(delivering_until__isnull=True) | Q(delivering_until__lt=now))
               .update(delivering_until=now + lease()))
    if not claimed:
        return False
    alert = Alert.objects.select_related("job__tenant", "rule").get(id=alert_id)
    rule = alert.rule
    log, ok = [], True
    if rule is not None and rule.webhook_url:
        error = send_webhook(alert, rule.webhook_url, now)
        log.append({"channel": "webhook", "at": now.isoformat(), "error": error})
        ok &= error is None
    if rule is not None and rule.emails:
        error = send_email(alert, rule.emails)
        log.append({"channel": "email", "at": now.isoformat(), "error": error})
        ok &= error is None
    attempts = alert.delivery_attempts + 1
    backoff = timedelta(seconds=30 * 2 ** (attempts - 1))
    Alert.objects.filter(id=alert_id).update(
        delivered_at=now if ok else None, delivery_attempts=attempts, delivering_until=None,
        next_delivery_at=None if ok else now + backoff, delivery_log=[*alert.delivery_log, *log][-20:])
    return ok


def payload(alert: Alert) -> dict:
    job = alert.job
    return {"type": "cronfleet.alert", "id": alert.dedup_key, "kind": alert.kind, "message": alert.message,
            "tenant": job.tenant.slug, "job": job.name, "job_id": job.id, "run_id": alert.run_id,
            "raised_at": alert.raised_at.isoformat(), "detail": alert.detail}


def send_webhook(alert: Alert, url: str, now: datetime) -> str | None:
    """POST the alert as JSON, signed with the tenant's secrets; None when it answered 2xx."""
    body = json.dumps(payload(alert), separators=(",", ":")).encode()
    secrets = [signing.parse_secret(s) for s in tenant_signing_secrets(alert.job.tenant, now)]
    signed = signing.headers(secrets, f"alert-{alert.id}", int(now.timestamp()), body,
                              attempt=alert.delivery_attempts + 1, scheduled_at=alert.raised_at.isoformat())
    try:
        response = httpclient.request(
            "POST", url, headers={"Content-Type": "application/json"}, signed_headers=signed, body=body,
            timeout=float(settings.CRONFLEET_ALERT_DELIVERY_TIMEOUT_SECONDS), max_response_bytes=4096,
            allowed_networks=[ipaddress.ip_network(net) for net in settings.CRONFLEET_HTTP_ALLOWED_NETWORKS],
            user_agent="Cronfleet-Alert/1")
    except netguard.BlockedTarget as exc:
        return f"{exc.reason}: {exc.detail}"
    except (httpclient.HttpTimeout, httpclient.HttpConnectionError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if 200 <= response.status < 300 else f"http {response.status}"


def send_email(alert: Alert, addresses: list[str]) -> str | None:
    try:
        send_mail(f"[Cronfleet] {alert.kind}: {alert.job}", f"{alert.message}\n\n{json.dumps(payload(alert), indent=2)}",
                  settings.DEFAULT_FROM_EMAIL, addresses, fail_silently=False)
    except Exception as exc:  # noqa: BLE001 - any backend's failure is a failed delivery, retried later
        return f"{type(exc).__name__}: {exc}"
    return None
