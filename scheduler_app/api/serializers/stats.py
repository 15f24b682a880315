"""The stats API's query and answer."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app.api.serializers.fields import QuerySerializer


class StatsQuerySerializer(QuerySerializer):
    window = serializers.IntegerField(
        required=False,
        default=3600,
        min_value=60,
        max_value=7 * 86400,
        help_text="Seconds back from now (60 to 604800). Up to 3600 exact; wider "
        "windows read the hourly rollup: counts as of each hour's roll-up, "
        "lag percentiles within 4.4 %",
    )
    all_tenants = serializers.BooleanField(
        required=False, default=False, help_text="Staff only: every tenant's runs (no X-Cronfleet-Tenant needed)"
    )


class LagSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="Runs measured")
    p50 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)


class StatsSerializer(serializers.Serializer):
    window_seconds = serializers.IntegerField()
    tenant = serializers.CharField(allow_null=True, help_text="The tenant's slug; null: all tenants")
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Runs scheduled in the window, by state")
    total = serializers.IntegerField()
    dispatch_lag_seconds = LagSerializer(
        help_text="coalesce(dispatched_at, enqueued_at) - scheduled_at, scheduled runs only"
    )
    start_lag_seconds = LagSerializer(
        help_text="started_at - scheduled_at for a first attempt, started_at - "
        "enqueued_at for a retry (its backoff is not lag); scheduled runs only"
    )
    failure_rate = serializers.FloatField(allow_null=True, help_text="(failed + dead) / (succeeded + failed + dead)")
