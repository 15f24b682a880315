"""The console's models: alert rules per job and the alerts they raised (scheduler_app/alerts/
evaluates them), and the per-minute rollup of finished runs behind the dashboard
(scheduler_app/observability/dashboard.py).

Imports nothing of the project but Django (and models/choices.py, Django's TextChoices for the type
checker): models.py imports these models from here.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from scheduler_app.models.choices import TextChoices


class AlertKind(TextChoices):
    NO_SUCCESS = "no_success"  # no successful run within period + grace: the dead-man's switch
    FAILED = "failed"  # a run ended failed or dead
    START_LAG = "start_lag"  # a run started later than max_start_lag_seconds after its fire time
    TOO_LONG = "too_long"  # a run took longer than max_duration_seconds
    TOO_SHORT = "too_short"  # a run took less than min_duration_seconds
    AUTO_PAUSED = "auto_paused"  # the job paused itself after repeated failure (ledger.autopause)
    CHECKIN_UP = "checkin_up"  # a monitored job that was down (and alerted) pinged success again
    TIME_DATA = "time_data"  # new zone or holiday data moved a fire the job holds (services/impact.py)
    PAUSE_EXPIRED = "pause_expired"  # a pause ran out and said "alert": paused, not healthy (alerts/pauses.py)


class AlertRule(models.Model):
    """What to watch on one job and where to say it. Every condition is optional."""

    job = models.OneToOneField("scheduler_app.Job", on_delete=models.CASCADE, related_name="alert_rule")
    enabled = models.BooleanField(default=True)
    no_success_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Expect a successful run at least this often (the dead-man's switch)"
    )
    grace_seconds = models.PositiveIntegerField(default=0, help_text="... plus this much slack")
    on_failure = models.BooleanField(default=False, help_text="Alert when a run ends failed or dead")
    max_start_lag_seconds = models.FloatField(
        null=True, blank=True, help_text="Alert when a run starts later than this after its fire time"
    )
    max_duration_seconds = models.FloatField(null=True, blank=True, help_text="Alert when a run takes longer")
    min_duration_seconds = models.FloatField(
        null=True, blank=True, help_text="Alert when a run finishes faster (it probably did nothing)"
    )
    webhook_url = models.CharField(
        max_length=2000, blank=True, help_text="POSTed a signed JSON alert (the tenant's webhook secret, as HTTP jobs)"
    )
    emails = models.JSONField(default=list, blank=True, help_text="Addresses mailed each alert")
    chat_url = models.CharField(
        max_length=2000,
        blank=True,
        db_default="",
        default="",
        help_text='A Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat): POSTed {"text": ...}',
    )
    cooldown_seconds = models.PositiveIntegerField(
        default=3600, help_text="After an alert of one kind, further ones of that kind wait this long"
    )

    # Evaluation state, written by the beat that holds the rule's row lock.
    checked_until = models.DateTimeField(help_text="Runs that started or ended before this are evaluated")
    last_success_at = models.DateTimeField(null=True, blank=True)
    next_check_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # alerts.claim_due_rules(): enabled rules by next check, SKIP LOCKED.
            models.Index(fields=["next_check_at"], name="alertrule_due_idx", condition=Q(enabled=True)),
        ]

    def __str__(self) -> str:
        return f"alerts of {self.job}"


class Alert(models.Model):
    """One alert raised: recorded once (unique dedup_key), then delivered."""

    rule = models.ForeignKey(AlertRule, null=True, on_delete=models.SET_NULL, related_name="alerts")
    job = models.ForeignKey("scheduler_app.Job", on_delete=models.CASCADE, related_name="alerts")
    tenant = models.ForeignKey("scheduler_app.Tenant", on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=16, choices=AlertKind.choices)
    # What the alert is about, once: the run and attempt, or for no_success the silence's start.
    dedup_key = models.CharField(max_length=200, unique=True)
    run_id = models.BigIntegerField(null=True, blank=True)
    message = models.CharField(max_length=1000)
    detail = models.JSONField(default=dict, blank=True)
    raised_at = models.DateTimeField()
    suppressed = models.PositiveIntegerField(
        default=0, help_text="Alerts of this kind held back by the cool-down since"
    )

    # Delivery: claimed by a compare-and-set on delivering_until, so two beats never both send.
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivery_attempts = models.PositiveSmallIntegerField(default=0)
    next_delivery_at = models.DateTimeField(null=True, blank=True)
    delivering_until = models.DateTimeField(null=True, blank=True)
    delivery_log = models.JSONField(default=list, blank=True, help_text="One entry per channel per attempt")

    class Meta:
        ordering = ["-raised_at", "-id"]
        indexes = [
            models.Index(fields=["job", "kind", "-raised_at"], name="alert_job_recent_idx"),
            # GET /api/v1/alerts/ and `alerts list`: a tenant's alerts, newest first.
            models.Index(fields=["tenant", "-raised_at", "-id"], name="alert_tenant_recent_idx"),
            # alerts.deliver_pending(): undelivered alerts by next attempt.
            models.Index(
                fields=["next_delivery_at"], name="alert_undelivered_idx", condition=Q(delivered_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} alert on job {self.job_id} at {self.raised_at:%Y-%m-%d %H:%M:%S}Z"


class RunMinute(models.Model):
    """Finished runs of one tenant in one minute (by finished_at), by outcome. tenant_id 0
    marks a minute as rolled up even when nothing finished in it."""

    minute = models.DateTimeField()
    tenant_id = models.BigIntegerField()  # not a foreign key: 0 is the marker row
    succeeded = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    dead = models.IntegerField(default=0)
    retrying = models.IntegerField(default=0)
    lost = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)
    skipped = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["minute", "tenant_id"], name="runminute_unique")]
