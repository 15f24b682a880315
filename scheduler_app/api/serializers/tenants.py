"""Tenants, API keys and /me in the API."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app import services
from scheduler_app.api.serializers.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
)
from scheduler_app.models import ApiKey, Tenant


class ApiKeySerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = ApiKey
        fields = ("id", "name", "prefix", "cell", "tenant", "created_at", "last_used_at", "revoked_at")
        read_only_fields = fields
        extra_kwargs = {
            "cell": {
                "help_text": "The cell the key's text names (CRONFLEET_CELL where it was made; "
                "empty: none); kept when its tenant moves"
            }
        }


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The key itself: shown in this response only, never again")

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")
        read_only_fields = fields


class ApiKeyCreateSerializer(StrictSerializer):
    name = StrictCharField(max_length=200, trim_whitespace=False, help_text="What the key is for")


TENANT_QUOTAS = tuple(services.TENANT_LIMITS)


class TenantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tenant
        fields = ("slug", "name", "timezone", "is_active", *TENANT_QUOTAS, "created_at")
        read_only_fields = fields


class TenantChangeSerializer(StrictSerializer):
    name = StrictCharField(max_length=200, trim_whitespace=False)
    timezone = StrictCharField(max_length=64)
    is_active = StrictBooleanField()
    max_jobs = StrictIntegerField(allow_null=True, help_text="null: no limit")
    min_interval_seconds = StrictIntegerField(help_text="The shortest interval between fires a job may ask for")
    max_fires_per_minute = StrictIntegerField(allow_null=True, help_text="null: no limit")
    max_concurrent_runs = StrictIntegerField(allow_null=True, help_text="null: no limit")
    weight = StrictIntegerField(max_value=32767, help_text="Fair share at dispatch")
    api_requests_per_minute = StrictIntegerField(
        allow_null=True, help_text="Per key; null: CRONFLEET_API_REQUESTS_PER_MINUTE"
    )
    manual_runs_per_hour = StrictIntegerField(
        allow_null=True,
        help_text="Triggers, replays and backfilled fires per hour (0: unbounded); null: CRONFLEET_MANUAL_RUNS_PER_HOUR",
    )


class TenantCreateSerializer(TenantChangeSerializer):
    slug = StrictCharField(max_length=64)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            field.required = name == "slug"


class RateLimitSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="false without Redis (CRONFLEET_RATE_LIMIT_REDIS_URL unset)")
    requests_per_minute = serializers.IntegerField(
        allow_null=True, help_text="For this key; null for sessions without a limit"
    )


class MeKeySerializer(serializers.Serializer):
    prefix = serializers.CharField()
    name = serializers.CharField()
    staff = serializers.BooleanField()


class MeSerializer(serializers.Serializer):
    key = MeKeySerializer(allow_null=True, help_text="The key in use; null for a staff session")
    user = serializers.CharField(allow_null=True, help_text="The staff user of a session; null for a key")
    tenant = TenantSerializer(allow_null=True, help_text="The key's tenant and its quotas; null for staff")
    rate_limit = RateLimitSerializer()
