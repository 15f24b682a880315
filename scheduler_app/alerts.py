"""Alerts per job: the dead-man's switch (no success within a period plus grace), failed or
dead runs, start lag above a threshold, durations above a maximum or below a minimum.

Evaluated by the beats, no extra process: runbeat calls on_beat_turn() after every turn,
which does something at most every CRONFLEET_ALERT_CHECK_SECONDS per beat. Exactly once
with any number of beats:

- a beat claims the rules due for a check with FOR UPDATE SKIP LOCKED (claim_due_rules), so
  one beat at a time evaluates a rule; it looks at the runs that started or ended since the
  rule's checked_until and moves checked_until on in the same transaction;
- each alert has a unique dedup_key (the run and attempt; for no_success the silence's
  start), inserted with ON CONFLICT DO NOTHING: the same thing is never recorded twice;
- the cool-down (per rule and kind) is judged under the rule's row lock: alerts held back by
  it are counted on the last alert (`suppressed`), not recorded;
- delivery happens after commit, claimed per alert by a compare-and-set on delivering_until,
  by webhook (signed like HTTP jobs, through the same client and SSRF guard) and e-mail
  (Django's e-mail backend); failures are retried with backoff up to DELIVERY_ATTEMPTS.

Rules are written through rule_set() / rule_delete(), used by the API, the CLI and the admin.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import connection, transaction
from django.db.models import F, Q

from scheduler_app import dashboard, httpclient, netguard, rollup, services, webhooks
from scheduler_app.consolemodels import Alert, AlertKind, AlertRule
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Trigger, db_now
from scheduler_app.validation import InvalidInput, check_url_path

logger = logging.getLogger(__name__)

RULES_PER_CHECK = 200  # rules one beat evaluates per check
RUNS_PER_RULE = 500  # runs looked at per rule per check (the rest wait for the next check)
ALERTS_PER_RULE = 10  # alerts one rule may raise per check
LOOKBACK = timedelta(days=1)  # a run ending now was fired at most this long ago (retries included)
DELIVERIES_PER_CHECK = 20
DELIVERY_ATTEMPTS = 5
DELIVERY_LEASE = timedelta(seconds=60)
DELIVERY_TIMEOUT_SECONDS = 5.0
FAILED_STATES = (RunState.FAILED, RunState.DEAD)
RULE_FIELDS = ("enabled", "no_success_seconds", "grace_seconds", "on_failure", "max_start_lag_seconds",
               "max_duration_seconds", "min_duration_seconds", "webhook_url", "emails", "cooldown_seconds")

_last_check = float("-inf")  # monotonic time of this process's last check


def check_every() -> float:
    return float(settings.CRONFLEET_ALERT_CHECK_SECONDS)


def on_beat_turn() -> bool:
    """The beat's hook: evaluate due rules, deliver pending alerts, roll up the dashboard's
    closed minutes and the stats' closed hours, at most every CRONFLEET_ALERT_CHECK_SECONDS in this process. Returns
    whether it ran."""
    global _last_check
    if time.monotonic() - _last_check < check_every():
        return False
    _last_check = time.monotonic()
    now = db_now()
    raised = evaluate_due_rules(now)
    deliver_pending(db_now())
    dashboard.roll_up(now)  # the dashboard's per-minute counts (idempotent across beats)
    rollup.roll_up(now)  # the hourly counts and lag histograms behind wide stats windows (idempotent too)
    if raised:
        logger.info("alerts: raised %s", raised)
    return True


# --- rules ------------------------------------------------------------------------------


def rule_set(job: Job, changes: dict, *, actor: str = "") -> AlertRule:
    """Create or change the job's alert rule with `changes` (RULE_FIELDS), validated."""
    values = validate_rule(changes)
    now = db_now()
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(job=job).first()
        if rule is None:
            rule = AlertRule(job=job, checked_until=now, next_check_at=now, last_success_at=None)
        before = {name: getattr(rule, name) for name in values}
        for name, value in values.items():
            setattr(rule, name, value)
        if rule.no_success_seconds is not None and (before.get("no_success_seconds") is None
                                                    or rule.last_success_at is None):
            # The switch starts counting when it is armed, not from the job's history.
            rule.last_success_at = rule.last_success_at or now
        rule.save()
        diff = {name: [before[name], value] for name, value in values.items() if before[name] != value}
        if diff:
            AuditEvent.objects.create(tenant_id=job.tenant_id, job=job, job_name=job.name, action="job.alerts_set",
                                      actor=actor, detail={"changes": diff})
    return rule


def rule_delete(job: Job, *, actor: str = "") -> bool:
    with transaction.atomic():
        deleted, _ = AlertRule.objects.filter(job=job).delete()
        if deleted:
            AuditEvent.objects.create(tenant_id=job.tenant_id, job=job, job_name=job.name,
                                      action="job.alerts_deleted", actor=actor)
    return bool(deleted)


def validate_rule(changes: dict) -> dict:
    values = {}
    for name, value in changes.items():
        if name not in RULE_FIELDS:
            raise InvalidInput(name, "is not an alert setting")
        if name in ("enabled", "on_failure"):
            if not isinstance(value, bool):
                raise InvalidInput(name, "must be true or false")
        elif name in ("no_success_seconds", "max_start_lag_seconds", "max_duration_seconds",
                      "min_duration_seconds"):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 < value <= 366 * 86400):
                raise InvalidInput(name, "must be a number of seconds between 0 and 366 days, or null")
            if name == "no_success_seconds" and value is not None:
                value = int(value)
        elif name in ("grace_seconds", "cooldown_seconds"):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 366 * 86400:
                raise InvalidInput(name, "must be a whole number of seconds, 0 to 366 days")
        elif name == "webhook_url":
            value = check_webhook_url(value)
        elif name == "emails":
            value = check_emails(value)
        values[name] = value
    low, high = (changes.get("min_duration_seconds"), changes.get("max_duration_seconds"))
    if low is not None and high is not None and low >= high:
        raise InvalidInput("min_duration_seconds", "must be below max_duration_seconds")
    return values


def check_webhook_url(value) -> str:
    if value in ("", None):
        return ""
    if not isinstance(value, str) or len(value) > 2000:
        raise InvalidInput("webhook_url", "must be a URL of at most 2000 characters")
    try:
        netguard.check_url(value)
    except netguard.BlockedTarget as exc:
        raise InvalidInput("webhook_url", exc.detail) from None
    check_url_path("webhook_url", value)
    return value


def check_emails(value) -> list[str]:
    if value in ("", None):
        return []
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or len(value) > 20:
        raise InvalidInput("emails", "must be a list of at most 20 addresses")
    for index, address in enumerate(value):
        try:
            validate_email(address)
        except (ValidationError, TypeError):
            raise InvalidInput(f"emails.{index}", f"{address!r} is not an e-mail address") from None
    return value


# --- evaluation -----------------------------------------------------------------------------


def claim_due_rules(now: datetime, *, limit: int) -> list[AlertRule]:
    """Lock the enabled rules due for a check; rules another beat holds are skipped.
    Call inside a transaction."""
    rules = AlertRule.objects.filter(enabled=True, next_check_at__lte=now).order_by("next_check_at")
    if connection.features.has_select_for_update_skip_locked:
        rules = rules.select_for_update(skip_locked=True, of=("self",))
    return list(rules.select_related("job__tenant")[:limit])


def evaluate_due_rules(now: datetime, *, limit: int = RULES_PER_CHECK) -> int:
    """Check every due rule once; return how many alerts were recorded. One transaction:
    the claims, the new alerts and the moved checked_until commit together."""
    raised = 0
    with transaction.atomic():
        for rule in claim_due_rules(now, limit=limit):
            raised += evaluate_rule(rule, now)
    return raised


def evaluate_rule(rule: AlertRule, now: datetime) -> int:
    """Look at the runs of the rule's job that started or ended in (checked_until, now];
    record what breaks the rule; move checked_until and next_check_at on. Under its lock."""
    job, since = rule.job, rule.checked_until
    runs = list(
        JobRun.objects.filter(job=job, scheduled_at__gt=since - LOOKBACK, scheduled_at__lte=now)
        .filter(Q(finished_at__gt=since, finished_at__lte=now) | Q(started_at__gt=since, started_at__lte=now))
        .order_by("scheduled_at")
        .only("id", "scheduled_at", "trigger", "state", "attempt", "started_at", "finished_at", "error")[:RUNS_PER_RULE]
    )
    until = now if len(runs) < RUNS_PER_RULE else max(max(r.started_at or since, r.finished_at or since) for r in runs)
    found = []
    for run in runs:
        found.extend(run_findings(rule, run, since, until))
    successes = [run.finished_at for run in runs if run.state == RunState.SUCCEEDED and run.finished_at
                 and run.finished_at <= until]
    if successes:
        rule.last_success_at = max([*successes, rule.last_success_at or successes[0]])
    if rule.no_success_seconds is not None:
        silent_since = rule.last_success_at or rule.created_at
        limit = timedelta(seconds=rule.no_success_seconds + rule.grace_seconds)
        if now - silent_since > limit:
            found.append((AlertKind.NO_SUCCESS, f"since:{silent_since.isoformat()}", None,
                          f"{job}: no successful run for {describe(now - silent_since)} "
                          f"(expected one every {describe(timedelta(seconds=rule.no_success_seconds))} "
                          f"+ {describe(timedelta(seconds=rule.grace_seconds))} grace)",
                          {"last_success_at": rule.last_success_at.isoformat() if rule.last_success_at else None}))
    raised = sum(record_alert(rule, now, *finding) for finding in found[:ALERTS_PER_RULE])
    rule.checked_until = until
    rule.next_check_at = now + timedelta(seconds=check_every())
    AlertRule.objects.filter(id=rule.id).update(checked_until=until, next_check_at=rule.next_check_at,
                                                last_success_at=rule.last_success_at)
    return raised


def run_findings(rule: AlertRule, run: JobRun, since: datetime, until: datetime) -> list[tuple]:
    """(kind, subject, run id, message, detail) for each way `run` breaks `rule`, judged on
    the transition that happened in (since, until]."""
    job, found = rule.job, []
    ended = run.finished_at is not None and since < run.finished_at <= until
    started = run.started_at is not None and since < run.started_at <= until
    subject = f"run{run.id}:a{run.attempt}"
    if rule.on_failure and ended and run.state in FAILED_STATES:
        found.append((AlertKind.FAILED, subject, run.id,
                      f"{job}: run {run.id} ({run.scheduled_at:%Y-%m-%d %H:%M:%S}Z) ended {run.state} on attempt "
                      f"{run.attempt}: {run.error[:300]}", {"state": run.state, "error": run.error[:2000]}))
    if (rule.max_start_lag_seconds is not None and started and run.trigger == Trigger.SCHEDULE
            and run.attempt == 1):
        lag = (run.started_at - run.scheduled_at).total_seconds()
        if lag > rule.max_start_lag_seconds:
            found.append((AlertKind.START_LAG, subject, run.id,
                          f"{job}: run {run.id} started {lag:.1f} s after its fire time "
                          f"(more than {rule.max_start_lag_seconds:g} s)", {"start_lag_seconds": lag}))
    if ended and run.started_at is not None and run.state not in (RunState.SKIPPED, RunState.CANCELLED):
        took = (run.finished_at - run.started_at).total_seconds()
        if rule.max_duration_seconds is not None and took > rule.max_duration_seconds:
            found.append((AlertKind.TOO_LONG, subject, run.id,
                          f"{job}: run {run.id} took {took:.1f} s (more than {rule.max_duration_seconds:g} s)",
                          {"duration_seconds": took}))
        if (rule.min_duration_seconds is not None and took < rule.min_duration_seconds
                and run.state == RunState.SUCCEEDED):
            found.append((AlertKind.TOO_SHORT, subject, run.id,
                          f"{job}: run {run.id} took only {took:.2f} s (less than {rule.min_duration_seconds:g} s)",
                          {"duration_seconds": took}))
    return found


def record_alert(rule: AlertRule, now: datetime, kind: str, subject: str, run_id: int | None, message: str,
                 detail: dict) -> int:
    """Record one alert unless its dedup_key exists (1) or the cool-down holds it back (0)."""
    last = (Alert.objects.filter(job_id=rule.job_id, kind=kind).order_by("-raised_at")
            .values("id", "raised_at", "dedup_key").first())
    key = f"job{rule.job_id}:{kind}:{subject}"
    if last is not None and last["dedup_key"] == key:
        return 0
    if last is not None and now - last["raised_at"] < timedelta(seconds=rule.cooldown_seconds):
        Alert.objects.filter(id=last["id"]).update(suppressed=F("suppressed") + 1)
        return 0
    with connection.cursor() as cursor:  # the unique key decides; a second beat's insert does nothing
        cursor.execute(INSERT_ALERT, {
            "rule": rule.id, "job": rule.job_id, "tenant": rule.job.tenant_id, "kind": kind, "key": key[:200],
            "run": run_id, "message": message[:1000], "detail": json.dumps(detail), "now": now})
        return cursor.rowcount


INSERT_ALERT = """
INSERT INTO scheduler_app_alert (rule_id, job_id, tenant_id, kind, dedup_key, run_id, message, detail, raised_at,
                                 suppressed, delivery_attempts, next_delivery_at, delivery_log)
VALUES (%(rule)s, %(job)s, %(tenant)s, %(kind)s, %(key)s, %(run)s, %(message)s, %(detail)s, %(now)s, 0, 0,
        %(now)s, '[]')
ON CONFLICT (dedup_key) DO NOTHING
"""


def describe_seconds(seconds: float) -> str:
    return describe(timedelta(seconds=seconds))


def describe(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds >= 3600:
        return f"{seconds // 3600} h" + (f" {seconds % 3600 // 60} min" if seconds % 3600 >= 60 else "")
    if seconds >= 60:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds} s"


# --- delivery -----------------------------------------------------------------------------


def deliver_pending(now: datetime, *, limit: int = DELIVERIES_PER_CHECK) -> int:
    """Send the undelivered alerts whose turn has come; return how many were delivered."""
    pending = list(Alert.objects.filter(delivered_at__isnull=True, next_delivery_at__lte=now,
                                        delivery_attempts__lt=DELIVERY_ATTEMPTS)
                   .order_by("next_delivery_at").values_list("id", flat=True)[:limit])
    return sum(deliver(alert_id, now) for alert_id in pending)


def deliver(alert_id: int, now: datetime) -> bool:
    """Claim the alert (compare-and-set on delivering_until), send it on every channel of its
    rule, and record the outcome. False: another beat has it, or a channel failed."""
    claimed = (Alert.objects.filter(id=alert_id, delivered_at__isnull=True)
               .filter(Q(delivering_until__isnull=True) | Q(delivering_until__lt=now))
               .update(delivering_until=now + DELIVERY_LEASE))
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
    secrets = [webhooks.parse_secret(s) for s in services.tenant_signing_secrets(alert.job.tenant, now)]
    signed = webhooks.headers(secrets, f"alert-{alert.id}", int(now.timestamp()), body,
                              attempt=alert.delivery_attempts + 1, scheduled_at=alert.raised_at.isoformat())
    try:
        response = httpclient.request(
            "POST", url, headers={"Content-Type": "application/json"}, signed_headers=signed, body=body,
            timeout=DELIVERY_TIMEOUT_SECONDS, max_response_bytes=4096,
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


def recent_alerts(job: Job, *, limit: int = 10) -> list[Alert]:
    return list(Alert.objects.filter(job=job).order_by("-raised_at")[:limit])
