"""Alert rules, one per job: validated and written here only (rule_set / rule_delete), by the
API, the CLI and the admin alike, each change recorded in the audit trail."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from scheduler_app.alerts.budget import min_cooldown
from scheduler_app.conf import app_settings
from scheduler_app.http import guard
from scheduler_app.models import AlertRule, AuditEvent, Job, JobRun, RunState, db_now
from scheduler_app.validation import InvalidInput, check_url_path

RULE_FIELDS = (
    "enabled",
    "no_success_seconds",
    "grace_seconds",
    "on_failure",
    "max_start_lag_seconds",
    "max_duration_seconds",
    "min_duration_seconds",
    "webhook_url",
    "chat_url",
    "emails",
    "cooldown_seconds",
)
# What a rule holds for a field not given when it is created or replaced as a whole (PUT).
RULE_DEFAULTS: dict[str, object] = {
    "enabled": True,
    "no_success_seconds": None,
    "grace_seconds": 0,
    "on_failure": False,
    "max_start_lag_seconds": None,
    "max_duration_seconds": None,
    "min_duration_seconds": None,
    "webhook_url": "",
    "chat_url": "",
    "emails": [],
    "cooldown_seconds": 3600,
}
MAX_SECONDS = 366 * 86400


def rule_set(job: Job, changes: dict, *, actor: str = "") -> AlertRule:
    """Create or change the job's alert rule with `changes` (RULE_FIELDS), validated."""
    values = validate_rule(changes)
    now = db_now()
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(job=job).first()
        if rule is None:
            rule = AlertRule(job=job, checked_until=now, next_check_at=now, last_success_at=last_success(job))
        created = rule.pk is None
        before = {name: getattr(rule, name) for name in values}
        for name, value in values.items():
            setattr(rule, name, value)
        if rule.no_success_seconds is not None and (
            before.get("no_success_seconds") is None or rule.last_success_at is None
        ):
            # The switch counts from the job's last success; armed on a job that never
            # succeeded (or not lately), from when it is armed.
            rule.last_success_at = rule.last_success_at or last_success(job) or now
        if (
            rule.min_duration_seconds is not None
            and rule.max_duration_seconds is not None
            and rule.min_duration_seconds >= rule.max_duration_seconds
        ):  # one given, the other kept
            raise InvalidInput("min_duration_seconds", "must be below max_duration_seconds")
        rule.save()
        diff = {name: [before[name], value] for name, value in values.items() if before[name] != value}
        if diff or created:
            AuditEvent.objects.create(
                tenant_id=job.tenant_id,
                job=job,
                job_name=job.name,
                action="job.alerts_set",
                actor=actor,
                detail={"changes": diff},
            )
    return rule


# Runs looked at for the job's last success, newest fire first down the (job, scheduled_at)
# index: a job failing for longer counts from when its rule is armed.
LAST_SUCCESS_LOOKBACK = 1000


def last_success(job: Job):
    """When the job's newest succeeded run (among its last LAST_SUCCESS_LOOKBACK fires) ended."""
    recent = JobRun.objects.filter(job=job).order_by("-scheduled_at").values("id")[:LAST_SUCCESS_LOOKBACK]
    return (
        JobRun.objects.filter(id__in=recent, state=RunState.SUCCEEDED, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )


def rule_delete(job: Job, *, actor: str = "") -> bool:
    with transaction.atomic():
        deleted, _ = AlertRule.objects.filter(job=job).delete()
        if deleted:
            AuditEvent.objects.create(
                tenant_id=job.tenant_id, job=job, job_name=job.name, action="job.alerts_deleted", actor=actor
            )
    return bool(deleted)


def validate_rule(changes: dict) -> dict:
    values = {}
    for name, value in changes.items():
        if name not in RULE_FIELDS:
            raise InvalidInput(name, "is not an alert setting")
        if name in ("enabled", "on_failure"):
            if not isinstance(value, bool):
                raise InvalidInput(name, "must be true or false")
        elif name in ("no_success_seconds", "max_start_lag_seconds", "max_duration_seconds", "min_duration_seconds"):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS
            ):
                raise InvalidInput(name, "must be a number of seconds between 0 and 366 days, or null")
            if name == "no_success_seconds" and value is not None:
                value = int(value)
        elif name in ("grace_seconds", "cooldown_seconds"):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SECONDS:
                raise InvalidInput(name, "must be a whole number of seconds, 0 to 366 days")
            if name == "cooldown_seconds" and value < min_cooldown():
                raise InvalidInput(name, f"must be at least {min_cooldown()} s (CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS)")
        elif name in ("webhook_url", "chat_url"):
            value = check_webhook_url(value, name)
        elif name == "emails":
            value = check_emails(value)
        values[name] = value
    low, high = (changes.get("min_duration_seconds"), changes.get("max_duration_seconds"))
    if low is not None and high is not None and low >= high:
        raise InvalidInput("min_duration_seconds", "must be below max_duration_seconds")
    return values


def check_webhook_url(value, field: str = "webhook_url") -> str:
    """A rule's webhook or chat (Slack-compatible incoming webhook) URL, checked as HTTP jobs'
    URLs are: the same SSRF guard, here and again at every delivery."""
    if value in ("", None):
        return ""
    if not isinstance(value, str) or len(value) > 2000:
        raise InvalidInput(field, "must be a URL of at most 2000 characters")
    try:
        target = guard.check_url(value)
    except guard.BlockedTarget as exc:
        raise InvalidInput(field, exc.detail) from None
    check_url_path(field, value)
    # A name is judged on what it resolves to at each delivery; an address, in any form, now.
    category = guard.literal_refusal(target.host, app_settings.HTTP_ALLOWED_NETWORKS)
    if category:  # an address refused at every delivery is refused now
        raise InvalidInput(field, f"a {category} address is not allowed (CRONFLEET_HTTP_ALLOWED_NETWORKS)")
    return value


def check_emails(value) -> list[str]:
    if value in ("", None):
        return []
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    cap = app_settings.ALERT_MAX_EMAILS_PER_RULE
    if not isinstance(value, list) or len(value) > cap:
        raise InvalidInput("emails", f"must be a list of at most {cap} addresses (CRONFLEET_ALERT_MAX_EMAILS_PER_RULE)")
    for index, address in enumerate(value):
        try:
            validate_email(address)
        except (ValidationError, TypeError):
            raise InvalidInput(f"emails.{index}", f"{address!r} is not an e-mail address") from None
    return value
