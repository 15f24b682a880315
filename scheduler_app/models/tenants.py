"""Tenants and their API keys: who owns jobs, within which bounds, and who may act for them."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC", help_text="Default zone for new cron jobs")
    is_active = models.BooleanField(default=True)
    # Webhook signing secrets (whsec_...), encrypted at rest (scheduler_app.http.secrets): they must
    # be readable to sign. During a rotation the previous one also signs until its deadline.
    webhook_secret_encrypted = models.TextField(blank=True, editable=False)
    webhook_secret_previous_encrypted = models.TextField(blank=True, editable=False)
    webhook_secret_previous_until = models.DateTimeField(null=True, blank=True, editable=False)

    # Quotas (NULL: no limit, but for max_jobs and manual_runs_per_hour, whose NULL is their
    # setting's default). Jobs and the interval are checked when a job is written; fires per
    # minute and concurrent runs at dispatch, where runs over the limit wait as pending.
    max_jobs = models.PositiveIntegerField(null=True, blank=True)
    min_interval_seconds = models.PositiveIntegerField(
        default=0, help_text="The shortest interval between two fires a job may ask for (0: any)"
    )
    max_fires_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_runs = models.PositiveIntegerField(null=True, blank=True)
    # Fair share at dispatch: a tenant of weight 2 gets twice the claims of weight 1 when
    # both have jobs due at once.
    weight = models.PositiveSmallIntegerField(default=1)
    # API requests each of the tenant's keys may make per minute (NULL: the setting's default).
    api_requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    # Triggers, replays and backfilled fires the tenant may record in any hour (services/common.py).
    manual_runs_per_hour = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Manual runs (triggers, replays, backfilled fires) per hour (0: unbounded); "
        "blank: CRONFLEET_MANUAL_RUNS_PER_HOUR",
    )
    # Retention of the tenant's finished runs (scheduler_app.ledger.retention); NULL: the setting.
    retention_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Days finished runs are kept (0: forever); blank: CRONFLEET_RETENTION_DAYS"
    )
    retention_failed_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Days failed and dead runs are kept, at least as long as the others "
        "(0: forever); blank: CRONFLEET_RETENTION_FAILED_DAYS",
    )
    retention_keep_last = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A job's newest runs kept whatever their age (0: none); blank: CRONFLEET_RETENTION_KEEP_LAST",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gte=1), name="tenant_weight_positive"),
        ]
        # Beside change_tenant (name, zone, active flag): the operator's bounds on a tenant
        # (docs/roles.md), in the admin and through the API alike.
        permissions = [("change_tenant_quotas", "Can change a tenant's quotas, weight and retention")]

    def __str__(self) -> str:
        return self.slug


class ApiKey(models.Model):
    """A bearer key for the REST API: `cf_<prefix>_<secret>`, or `cf_<cell>_<prefix>_<secret>`
    when made in a named cell (CRONFLEET_CELL), shown once when made.

    Only a SHA-256 of the whole key is kept (keys are 190 random bits: a slow hash buys
    nothing); the prefix is stored in clear to find the row and to tell keys apart.
    A key without a tenant is a staff key: it administers tenants and may act for any.
    """

    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    # The cell named in the key's text (empty: none). It stays the same when the tenant moves
    # to another cell: the routing proxy then sends this prefix there (`cells routes`).
    cell = models.CharField(max_length=16, blank=True, default="", db_default="", editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"
        # A key acts as its tenant: making one takes this beside add_apikey (docs/roles.md).
        permissions = [("mint_apikey", "Can make an API key (shown once) for a tenant")]

    def __str__(self) -> str:
        return f"{self.prefix} ({self.name})"

    @property
    def is_staff(self) -> bool:
        return self.tenant_id is None
