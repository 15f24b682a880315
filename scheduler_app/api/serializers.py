"""Request and response shapes of the API.

Request serializers check shape and types only, strictly (no "300" for 300, no true for
1, no time without a UTC offset, no unknown keys) and hand plain values to the services,
which decide what they mean. Integer bounds here are those of the columns, so nothing
overflows even before a service looks; the services' own ranges are narrower.

A job's schedule is exactly one of {"cron", "timezone"?}, {"every"} or {"at"}; its target
one of {"kind": "task"|"http"|"command"|"sql", ...}. services.JobSpec spells both flat
(cron/every/at, target_kind/task_name/http/command/sql); spec_fields() translates, and
api_field() maps the field a service names back to the request's path.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import (
    PolymorphicProxySerializer,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers

from scheduler_app import schedules, services, validation
from scheduler_app.models import (
    ApiKey,
    Job,
    JobRun,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    OverlapPolicy,
    RunState,
    Tenant,
    Trigger,
)

INT32_MAX = 2**31 - 1  # PositiveIntegerField's column
INT64_MAX = 2**63 - 1  # ids
MAX_PREVIEW = 100

# --- strict fields ----------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    """Text only: DRF's CharField would take 300 or 1.5 and store "300" / "1.5"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: not "300", not 300.0, not true. Bounded by the column."""

    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be a whole number"}

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", INT32_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


class StrictBooleanField(serializers.BooleanField):
    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be true or false"}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 instant with a UTC offset ("Z" or "+01:00"), returned in UTC.

    A local time without an offset is refused, never guessed: it may not exist (spring
    forward) or happen twice (autumn). So are digits other than ASCII 0-9, which
    parse_datetime would read as if they were.
    """

    default_error_messages: ClassVar[dict[str, str]] = {
        "invalid": "must be an ISO 8601 date and time with a UTC offset, e.g. 2030-01-31T09:00:00+01:00",
        "naive": "has no UTC offset; add Z or +HH:MM (a local time is never guessed)",
        "range": "must be between 1970 and 9999",
    }
    # Nothing a scheduler does happens before 1970; instants near datetime.min would
    # overflow the arithmetic the services do on them.
    EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)

    def to_internal_value(self, value):
        if not isinstance(value, str) or len(value) > 64:
            self.fail("invalid")
        try:
            validation.check_instant_text(self.field_name, value)
        except validation.InvalidInput as exc:
            raise serializers.ValidationError(exc.message) from None
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:  # well formed but impossible, such as month 13
            parsed = None
        if parsed is None:
            self.fail("invalid")
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail("naive")
        try:
            instant = parsed.astimezone(UTC)
        except OverflowError:
            self.fail("range")
        if instant < self.EARLIEST:
            self.fail("range")
        return instant


class StrictSerializer(serializers.Serializer):
    # Refuses keys it does not know, naming them: a misspelt field is a mistake to report,
    # not to ignore. (A comment, not a docstring: the schema would show it on every body.)

    read_only_names: tuple[str, ...] = ()  # fields of the response that cannot be written

    def to_internal_value(self, data):
        if isinstance(data, dict):
            errors = {key: "is read-only" if key in self.read_only_names else "is not a known field"
                      for key in data if key not in self.fields}
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class QuerySerializer(serializers.Serializer):
    # Query parameters, refusing names it does not know: a misspelt filter (?stat=dead)
    # would otherwise list everything. `also_allowed` are read elsewhere (pagination).

    also_allowed: tuple[str, ...] = ()

    def to_internal_value(self, data):
        unknown = {key: "is not a known query parameter" for key in data
                   if key not in self.fields and key not in self.also_allowed}
        if unknown:
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


class ListQuerySerializer(QuerySerializer):
    also_allowed = ("cursor", "limit")


def validated(serializer_class, data, **kwargs) -> dict:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --- schedule ---------------------------------------------------------------------------


class CronScheduleSerializer(StrictSerializer):
    cron = StrictCharField(max_length=schedules.MAX_CRON_LENGTH,
                           help_text="5 fields (minute hour day-of-month month day-of-week) or @hourly, @daily, ...")
    timezone = StrictCharField(required=False, max_length=64,
                               help_text="IANA zone the expression is read in; default: the job's zone "
                                         "(the tenant's for a new job)")


class IntervalScheduleSerializer(StrictSerializer):
    every = StrictIntegerField(help_text="Seconds between fires, counted from the job's creation (or start_at)")


class OnceScheduleSerializer(StrictSerializer):
    at = AwareDateTimeField(help_text="The one fire time, with a UTC offset")


SCHEDULE_KINDS = {"cron": CronScheduleSerializer, "every": IntervalScheduleSerializer, "at": OnceScheduleSerializer}


@extend_schema_field(PolymorphicProxySerializer(
    component_name="Schedule", serializers=list(SCHEDULE_KINDS.values()), resource_type_field_name=None, many=False))
class ScheduleField(serializers.Field):
    default_error_messages: ClassVar[dict[str, str]] = {"kind": "give exactly one of cron, every or at"}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("kind")
        kinds = [key for key in SCHEDULE_KINDS if key in data]
        if len(kinds) != 1:
            self.fail("kind")
        return dict(validated(SCHEDULE_KINDS[kinds[0]], data))

    def to_representation(self, job: Job):
        if job.cron:
            return {"cron": job.cron, "timezone": job.timezone}
        if job.every_seconds is not None:
            return {"every": job.every_seconds}
        return {"at": serializers.DateTimeField().to_representation(job.run_at)}


# --- target -----------------------------------------------------------------------------


class TaskTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["task"])
    task = StrictCharField(max_length=200, help_text="A task name from CRONFLEET_ALLOWED_TASKS")
    args = serializers.ListField(required=False, default=list)
    kwargs = serializers.DictField(required=False, default=dict)


class HttpTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["http"])
    method = serializers.ChoiceField(choices=services.HTTP_METHODS, default="POST")
    url = StrictCharField(max_length=2048)
    headers = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False, max_length=8192), required=False, default=dict)
    body = StrictCharField(allow_blank=True, trim_whitespace=False, required=False, default="")


class CommandTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["command"])
    name = StrictCharField(max_length=100, help_text="A program named in CRONFLEET_COMMANDS")
    params = serializers.DictField(required=False, default=dict)


class SqlTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["sql"])
    name = StrictCharField(max_length=100, help_text="A statement named in CRONFLEET_SQL")
    params = serializers.DictField(
        required=False, default=dict,
        help_text="The statement's declared parameters (bound, never interpolated); fire_key, scheduled_at, "
                  "attempt and tenant are filled from the run")


TARGET_KINDS = {"task": TaskTargetSerializer, "http": HttpTargetSerializer, "command": CommandTargetSerializer,
                "sql": SqlTargetSerializer}


@extend_schema_field(PolymorphicProxySerializer(
    component_name="Target", serializers=TARGET_KINDS, resource_type_field_name="kind", many=False))
class TargetField(serializers.Field):
    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an object with a kind")
        kind = data.get("kind")
        if not isinstance(kind, str) or kind not in TARGET_KINDS:
            raise serializers.ValidationError({"kind": f"must be one of {', '.join(TARGET_KINDS)}"})
        return dict(validated(TARGET_KINDS[kind], data))

    def to_representation(self, job: Job):
        if job.target_kind == "task":
            return {"kind": "task", "task": job.task_name, "args": job.args, "kwargs": job.kwargs}
        config = job.target_config
        if job.target_kind == "http":
            return {"kind": "http", "method": config.get("method", "POST"), "url": config.get("url", ""),
                    "headers": config.get("headers", {}), "body": config.get("body", "")}
        return {"kind": job.target_kind, "name": config.get("name", ""), "params": config.get("params", {})}


# --- jobs -------------------------------------------------------------------------------

SPEC_PLAIN_FIELDS = (
    "name", "description", "tags", "start_at", "end_at", "queue", "priority", "timeout_seconds", "max_attempts",
    "retry_backoff_seconds", "retry_backoff_max_seconds", "misfire_policy", "catchup_window_seconds",
    "run_all_cap", "overlap_policy", "jitter_seconds", "batch",
)
# Where a service's field name lives in the API's representation.
SERVICE_FIELDS = {
    "cron": "schedule.cron", "timezone": "schedule.timezone", "every": "schedule.every", "at": "schedule.at",
    "anchor": "schedule", "task": "target.task", "target_kind": "target.kind", "args": "target.args",
    "kwargs": "target.kwargs", "command": "target.name", "sql": "target",
}


def api_field(field: str) -> str:
    if field in SERVICE_FIELDS:
        return SERVICE_FIELDS[field]
    for prefix in ("http.", "command.", "sql."):
        if field.startswith(prefix):
            return f"target.{field.removeprefix(prefix)}"
    return field


def spec_fields(data: dict) -> dict:
    """services.JobSpec fields from a validated job body. A schedule or a target given
    replaces the old one whole (kinds not given are cleared)."""
    fields = {name: data[name] for name in SPEC_PLAIN_FIELDS if name in data}
    if "schedule" in data:
        schedule = data["schedule"]
        fields.update(cron=schedule.get("cron", ""), every=schedule.get("every"), at=schedule.get("at"))
        if "timezone" in schedule:  # else a new job reads cron in the tenant's zone, an edit in the job's
            fields["timezone"] = schedule["timezone"]
    if "target" in data:
        target = data["target"]
        kind = target["kind"]
        fields.update(
            target_kind=kind, task_name=target.get("task", ""), args=target.get("args", []),
            kwargs=target.get("kwargs", {}),
            http={key: target[key] for key in ("method", "url", "headers", "body")} if kind == "http" else None,
            command={"name": target["name"], "params": target["params"]} if kind == "command" else None,
            sql={"name": target["name"], "params": target["params"]} if kind == "sql" else None,
        )
    return fields


@extend_schema_serializer(component_name="Job")
class JobWriteSerializer(StrictSerializer):
    """A job as written: all of it to create, any part of it to PATCH (or to ask its impact)."""

    read_only_names = ("id", "enabled", "paused_note", "next_run_at", "version", "created_at", "updated_at")

    name = StrictCharField(max_length=200, trim_whitespace=False)
    description = StrictCharField(required=False, allow_blank=True, trim_whitespace=False, max_length=10_000)
    tags = serializers.ListField(child=StrictCharField(max_length=64, trim_whitespace=False), required=False,
                                 max_length=validation.MAX_TAGS)
    schedule = ScheduleField()
    target = TargetField()
    start_at = AwareDateTimeField(required=False, allow_null=True, help_text="No fires before this instant")
    end_at = AwareDateTimeField(required=False, allow_null=True, help_text="No fires after this instant")
    queue = StrictCharField(required=False, allow_blank=True, max_length=100, help_text="Celery queue; blank: default")
    priority = StrictIntegerField(
        required=False, min_value=PRIORITY_MIN, max_value=PRIORITY_MAX,
        help_text=f"{PRIORITY_MIN}-{PRIORITY_MAX}, higher first (default {PRIORITY_DEFAULT}): claimed first among "
                  "the tenant's due jobs, released first from a quota wait, taken first from the broker queue")
    timeout_seconds = StrictIntegerField(required=False)
    max_attempts = StrictIntegerField(required=False, max_value=32767)
    retry_backoff_seconds = StrictIntegerField(required=False)
    retry_backoff_max_seconds = StrictIntegerField(required=False)
    misfire_policy = serializers.ChoiceField(choices=[p.value for p in schedules.MisfirePolicy], required=False)
    catchup_window_seconds = StrictIntegerField(required=False)
    run_all_cap = StrictIntegerField(required=False)
    overlap_policy = serializers.ChoiceField(choices=OverlapPolicy.choices, required=False)
    jitter_seconds = StrictIntegerField(
        required=False, max_value=schedules.MAX_JITTER_SECONDS,
        help_text="Each fire moves later by a stable random 0..N-1 seconds; at most the shortest gap between fires")
    batch = StrictBooleanField(
        required=False, help_text="Short, idempotent targets only: runs travel to workers in batches (one message, "
                                  "one statement to start and one to end many runs); a worker that dies costs the "
                                  "batch one lease, and its unfinished runs are retried")


class JobSerializer(serializers.ModelSerializer):
    schedule = ScheduleField(source="*", read_only=True)
    target = TargetField(source="*", read_only=True)
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Job
        fields = (
            "id", "name", "description", "tags", "schedule", "target", "start_at", "end_at", "queue", "priority",
            "timeout_seconds", "max_attempts", "retry_backoff_seconds", "retry_backoff_max_seconds",
            "misfire_policy", "catchup_window_seconds", "run_all_cap", "overlap_policy", "jitter_seconds", "batch",
            "enabled",
            "paused_note", "next_run_at", "version", "created_at", "updated_at",
        )
        read_only_fields = fields


class JobFilterSerializer(ListQuerySerializer):
    tag = serializers.CharField(required=False, max_length=64, help_text="Jobs carrying this tag")
    enabled = serializers.BooleanField(required=False, allow_null=True, default=None,
                                       help_text="true: running jobs; false: paused ones")
    name = serializers.CharField(required=False, max_length=200, help_text="The job with this exact name")


class PauseSerializer(StrictSerializer):
    note = StrictCharField(required=False, allow_blank=True, max_length=500, help_text="Why (kept until resumed)")


class PreviewQuerySerializer(QuerySerializer):
    count = serializers.IntegerField(required=False, default=10, min_value=1, max_value=MAX_PREVIEW)


class SchedulePreviewSerializer(StrictSerializer):
    schedule = ScheduleField()
    count = StrictIntegerField(required=False, default=10, min_value=1, max_value=MAX_PREVIEW)
    start_at = AwareDateTimeField(required=False, allow_null=True)
    end_at = AwareDateTimeField(required=False, allow_null=True)


@extend_schema_field({"type": "string", "format": "date-time"})
class LocalTimeField(serializers.Field):
    """An instant in a given zone's wall time, with that zone's offset (not converted to UTC)."""

    def to_representation(self, value):
        return value.isoformat()


class FireSerializer(serializers.Serializer):
    utc = serializers.DateTimeField()
    local = LocalTimeField(help_text="The same instant in the schedule's zone, with its offset")
    anomaly = serializers.CharField(allow_null=True,
                                    help_text="dst_gap or dst_repeated with an explanation; null for an ordinary fire")


class PreviewSerializer(serializers.Serializer):
    timezone = serializers.CharField()
    fires = FireSerializer(many=True)


class SkippedFireSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    reason = serializers.CharField()


class ImpactSerializer(serializers.Serializer):
    fires_now = serializers.ListField(child=serializers.DateTimeField(),
                                      help_text="Fires due at once if the edit is saved")
    skipped = SkippedFireSerializer(many=True, help_text="Upcoming fires the edit drops")
    next_before = serializers.ListField(child=serializers.DateTimeField())
    next_after = serializers.ListField(child=serializers.DateTimeField())
    changes = serializers.DictField(child=serializers.ListField(), help_text="field: [before, after]")
    paused = serializers.BooleanField()


class BackfillSerializer(StrictSerializer):
    start = AwareDateTimeField()
    end = AwareDateTimeField()
    dry_run = StrictBooleanField(required=False, default=True, help_text="Only say which runs would be recorded")


class BackfillResultSerializer(serializers.Serializer):
    fires = serializers.ListField(child=serializers.DateTimeField(), help_text="The job's fire times in the range")
    missing = serializers.ListField(child=serializers.DateTimeField(), help_text="Those without a run yet")
    created = serializers.IntegerField()
    held = serializers.IntegerField(help_text="Of those created, how many wait for the tenant's dispatch quota")
    existing = serializers.IntegerField()
    dry_run = serializers.BooleanField()


class BulkSerializer(StrictSerializer):
    tag = StrictCharField(max_length=64)
    action = serializers.ChoiceField(choices=services.BULK_ACTIONS)
    note = StrictCharField(required=False, allow_blank=True, max_length=500)


class BulkResultSerializer(serializers.Serializer):
    tag = serializers.CharField()
    action = serializers.ChoiceField(choices=services.BULK_ACTIONS)
    count = serializers.IntegerField(help_text="How many jobs changed")


# --- runs -------------------------------------------------------------------------------

RUN_FIELDS = (
    "id", "job", "job_name", "scheduled_at", "trigger", "state", "attempt", "reason", "job_version", "priority",
    "created_at", "enqueued_at", "dispatched_at", "started_at", "finished_at", "next_attempt_at", "worker",
    "duplicate_deliveries",
)


class RunSerializer(serializers.ModelSerializer):
    job_name = serializers.CharField(read_only=True)

    class Meta:
        model = JobRun
        fields = RUN_FIELDS
        read_only_fields = fields


class RunEventSerializer(serializers.Serializer):
    action = serializers.CharField()
    actor = serializers.CharField()
    detail = serializers.DictField()
    created_at = serializers.DateTimeField()


class AttemptSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    worker = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField()
    outcome = serializers.CharField(help_text="succeeded, failed, retrying, dead or lost")
    error = serializers.CharField(help_text="The first 500 characters of the attempt's error")


class RunDetailSerializer(RunSerializer):
    attempts = AttemptSerializer(many=True, read_only=True,
                                 help_text="Every finished attempt, oldest first (the current one is the run's own "
                                           "attempt, worker and started_at)")
    events = RunEventSerializer(many=True, read_only=True,
                                help_text="What the audit trail says of the run, oldest first: operator actions "
                                          "(replay, trigger) and anomalies (duplicate deliveries, stale writes, "
                                          "lost leases)")

    class Meta(RunSerializer.Meta):
        fields = (*RUN_FIELDS, "heartbeat_at", "lease_expires_at", "celery_task_id", "result", "error", "attempts",
                  "events")
        read_only_fields = fields


class TriggeredRunSerializer(RunSerializer):
    publish_error = serializers.CharField(read_only=True, allow_null=True,
                                          help_text="Set when the run is recorded but did not reach the broker "
                                                    "(the beat's sweep publishes it again)")

    class Meta(RunSerializer.Meta):
        fields = (*RUN_FIELDS, "publish_error")
        read_only_fields = fields


class RunFilterSerializer(ListQuerySerializer):
    job = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX, help_text="Runs of this job")
    state = serializers.ChoiceField(choices=RunState.choices, required=False)
    trigger = serializers.ChoiceField(choices=Trigger.choices, required=False)
    scheduled_after = AwareDateTimeField(required=False, help_text="Fire times strictly after this instant")
    scheduled_before = AwareDateTimeField(required=False, help_text="Fire times strictly before this instant")


# --- keys, tenants, me, stats -------------------------------------------------------------


class ApiKeySerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = ApiKey
        fields = ("id", "name", "prefix", "tenant", "created_at", "last_used_at", "revoked_at")
        read_only_fields = fields


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
    api_requests_per_minute = StrictIntegerField(allow_null=True,
                                                 help_text="Per key; null: CRONFLEET_API_REQUESTS_PER_MINUTE")


class TenantCreateSerializer(TenantChangeSerializer):
    slug = StrictCharField(max_length=64)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            field.required = name == "slug"


class RateLimitSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="false without Redis (CRONFLEET_RATE_LIMIT_REDIS_URL unset)")
    requests_per_minute = serializers.IntegerField(allow_null=True, help_text="For this key; null for sessions "
                                                                              "without a limit")


class MeKeySerializer(serializers.Serializer):
    prefix = serializers.CharField()
    name = serializers.CharField()
    staff = serializers.BooleanField()


class MeSerializer(serializers.Serializer):
    key = MeKeySerializer(allow_null=True, help_text="The key in use; null for a staff session")
    user = serializers.CharField(allow_null=True, help_text="The staff user of a session; null for a key")
    tenant = TenantSerializer(allow_null=True, help_text="The key's tenant and its quotas; null for staff")
    rate_limit = RateLimitSerializer()


class StatsQuerySerializer(QuerySerializer):
    window = serializers.IntegerField(required=False, default=3600, min_value=60, max_value=7 * 86400,
                                      help_text="Seconds back from now (60 to 604800). Up to 3600 exact; wider "
                                                "windows read the hourly rollup: counts as of each hour's roll-up, "
                                                "nearest-rank lag percentiles within 4.4 %")
    all_tenants = serializers.BooleanField(required=False, default=False,
                                           help_text="Staff only: every tenant's runs (no X-Cronfleet-Tenant needed)")


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
    dispatch_lag_seconds = LagSerializer(help_text="coalesce(dispatched_at, enqueued_at) - scheduled_at, "
                                                   "scheduled runs only")
    start_lag_seconds = LagSerializer(help_text="started_at - scheduled_at for a first attempt, started_at - "
                                                "enqueued_at for a retry (its backoff is not lag); scheduled runs only")
    failure_rate = serializers.FloatField(allow_null=True, help_text="(failed + dead) / (succeeded + failed + dead)")

