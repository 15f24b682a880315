"""A job in the API: its schedule and target (one of several shapes each), the write and read
shapes, the list filter, and the actions' bodies and answers (pause, preview, impact,
backfill, bulk)."""

from __future__ import annotations

from typing import ClassVar

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from scheduler_app import schedules, services, validation
from scheduler_app.api.serializers.fields import (
    MAX_PREVIEW,
    AwareDateTimeField,
    ListQuerySerializer,
    QuerySerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    validated,
)
from scheduler_app.ledger import checkstatus
from scheduler_app.models import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN, Job, OverlapPolicy, TargetKind
from scheduler_app.targets.http import HTTP_METHODS


class CronScheduleSerializer(StrictSerializer):
    cron = StrictCharField(
        max_length=schedules.MAX_CRON_LENGTH,
        help_text="5 fields (minute hour day-of-month month day-of-week) or @hourly, @daily, ...",
    )
    timezone = StrictCharField(
        required=False,
        max_length=64,
        help_text="IANA zone the expression is read in; default: the job's zone (the tenant's for a new job)",
    )


class IntervalScheduleSerializer(StrictSerializer):
    every = StrictIntegerField(help_text="Seconds between fires, counted from the job's creation (or start_at)")


class OnceScheduleSerializer(StrictSerializer):
    at = AwareDateTimeField(help_text="The one fire time, with a UTC offset")


class WindowScheduleSerializer(StrictSerializer):
    window = StrictCharField(
        max_length=40,
        help_text="A flexible window, placed at its least loaded minute "
        "(docs/flexible-windows.md): 'daily HH:MM-HH:MM' (end "
        "excluded; across midnight allowed), 'daily' or 'hourly'",
    )
    scope = serializers.ChoiceField(
        choices=services.FLEX_SCOPES,
        required=False,
        help_text="Whose planned fires the placement avoids: the tenant's (default) "
        "or those of every job on the same queue",
    )
    timezone = StrictCharField(
        required=False,
        max_length=64,
        help_text="IANA zone the window is read in; default: the job's zone (the tenant's for a new job)",
    )
    chosen = StrictCharField(
        read_only=True,
        help_text="The cron expression the window was placed at; it moves "
        "only when the window is edited or on `jobs rebalance`",
    )
    why = StrictCharField(
        read_only=True, help_text="The chosen time and why: its planned fires, the fewest in the window"
    )


SCHEDULE_KINDS = {
    "cron": CronScheduleSerializer,
    "every": IntervalScheduleSerializer,
    "at": OnceScheduleSerializer,
    "window": WindowScheduleSerializer,
}


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="Schedule", serializers=list(SCHEDULE_KINDS.values()), resource_type_field_name=None, many=False
    )
)
class ScheduleField(serializers.Field):
    default_error_messages: ClassVar[dict[str, str]] = {"kind": "give exactly one of cron, every, at or window"}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("kind")
        kinds = [key for key in SCHEDULE_KINDS if key in data]
        if len(kinds) != 1:
            self.fail("kind")
        return dict(validated(SCHEDULE_KINDS[kinds[0]], data))

    def to_representation(self, job: Job):
        if job.after_job_id is not None:
            return None  # a chained job: no schedule of its own (after_job)
        if job.flex_window:
            return {
                "window": job.flex_window,
                "scope": job.flex_scope,
                "timezone": job.timezone,
                "chosen": job.cron,
                "why": job.flex_note,
            }
        if job.cron:
            return {"cron": job.cron, "timezone": job.timezone}
        if job.every_seconds is not None:
            return {"every": job.every_seconds}
        return {"at": serializers.DateTimeField().to_representation(job.run_at)}


class TaskTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["task"])
    task = StrictCharField(
        max_length=200, help_text="A task name that CRONFLEET_ALLOWED_TASKS allows (names or patterns)"
    )
    args = serializers.ListField(required=False, default=list)
    kwargs = serializers.DictField(required=False, default=dict)


class HttpTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["http"])
    method = serializers.ChoiceField(choices=HTTP_METHODS, default="POST")
    url = StrictCharField(max_length=2048)
    headers = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False, max_length=8192), required=False, default=dict
    )
    body = StrictCharField(allow_blank=True, trim_whitespace=False, required=False, default="")


class CommandTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["command"])
    name = StrictCharField(max_length=100, help_text="A program named in CRONFLEET_COMMANDS")
    params = serializers.DictField(required=False, default=dict)


class SqlTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["sql"])
    name = StrictCharField(max_length=100, help_text="A statement named in CRONFLEET_SQL")
    params = serializers.DictField(
        required=False,
        default=dict,
        help_text="The statement's declared parameters (bound, never interpolated); fire_key, scheduled_at, "
        "attempt and tenant are filled from the run",
    )


class MonitorTargetSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["monitor"])
    grace_seconds = StrictIntegerField(
        required=False,
        default=300,
        help_text="Runs elsewhere and pings its ping_url (docs/check-ins.md): a fire with no successful ping "
        "within this many seconds (of the fire, or of its /start) ends failed as missed",
    )
    ping_url = StrictCharField(read_only=True, help_text="The check-in URL (its key is the only credential)")


TARGET_KINDS = {
    "task": TaskTargetSerializer,
    "http": HttpTargetSerializer,
    "command": CommandTargetSerializer,
    "sql": SqlTargetSerializer,
    "monitor": MonitorTargetSerializer,
}


def monitor_target(job: Job) -> dict:
    """A monitored job's target: its grace and its check-in URL (at CRONFLEET_PING_BASE_URL,
    the address the machines that run it reach Cronfleet at)."""
    monitor = getattr(job, "monitor", None)
    return {
        "kind": "monitor",
        "grace_seconds": job.target_config.get("grace_seconds"),
        "ping_url": services.ping_url(monitor) if monitor is not None else None,
    }


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="Target", serializers=TARGET_KINDS, resource_type_field_name="kind", many=False
    )
)
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
        if job.target_kind == "monitor":
            return monitor_target(job)
        if job.target_kind == "http":
            return {
                "kind": "http",
                "method": config.get("method", "POST"),
                "url": config.get("url", ""),
                "headers": config.get("headers", {}),
                "body": config.get("body", ""),
            }
        return {"kind": job.target_kind, "name": config.get("name", ""), "params": config.get("params", {})}


SPEC_PLAIN_FIELDS = (
    "name",
    "description",
    "tags",
    "start_at",
    "end_at",
    "queue",
    "priority",
    "timeout_seconds",
    "max_attempts",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "misfire_policy",
    "catchup_window_seconds",
    "run_all_cap",
    "overlap_policy",
    "jitter_seconds",
    "batch",
    "pause_after_failures",
    "calendar",
    "calendar_policy",
    "after_job",
    "after_states",
)


# Where a service's field name lives in the API's representation.
SERVICE_FIELDS = {
    "cron": "schedule.cron",
    "timezone": "schedule.timezone",
    "every": "schedule.every",
    "at": "schedule.at",
    "anchor": "schedule",
    "task": "target.task",
    "target_kind": "target.kind",
    "args": "target.args",
    "kwargs": "target.kwargs",
    "command": "target.name",
    "sql": "target",
    "monitor": "target",
    "grace_seconds": "target.grace_seconds",
    "flex_window": "schedule.window",
    "flex_scope": "schedule.scope",
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
        fields.update(
            cron=schedule.get("cron", ""),
            every=schedule.get("every"),
            at=schedule.get("at"),
            flex_window=schedule.get("window", ""),
            flex_scope=schedule.get("scope", ""),
        )
        if "timezone" in schedule:  # else a new job reads cron in the tenant's zone, an edit in the job's
            fields["timezone"] = schedule["timezone"]
    if "target" in data:
        target = data["target"]
        kind = target["kind"]
        fields.update(
            target_kind=kind,
            task_name=target.get("task", ""),
            args=target.get("args", []),
            kwargs=target.get("kwargs", {}),
            http={key: target[key] for key in ("method", "url", "headers", "body")} if kind == "http" else None,
            command={"name": target["name"], "params": target["params"]} if kind == "command" else None,
            sql={"name": target["name"], "params": target["params"]} if kind == "sql" else None,
            monitor={"grace_seconds": target["grace_seconds"]} if kind == "monitor" else None,
        )
    return fields


@extend_schema_serializer(component_name="Job")
class JobWriteSerializer(StrictSerializer):
    """A job as written: all of it to create, any part of it to PATCH (or to ask its impact)."""

    read_only_names = (
        "id",
        "enabled",
        "paused_note",
        "paused_by",
        "paused_at",
        "paused_until",
        "pause_expiry",
        "next_run_at",
        "version",
        "created_at",
        "updated_at",
        "managed_by",
        "consecutive_failures",
        "auto_paused_at",
    )

    name = StrictCharField(max_length=200, trim_whitespace=False)
    description = StrictCharField(required=False, allow_blank=True, trim_whitespace=False, max_length=10_000)
    tags = serializers.ListField(
        child=StrictCharField(max_length=64, trim_whitespace=False), required=False, max_length=validation.MAX_TAGS
    )
    schedule = ScheduleField(required=False, help_text="Required, except for a chained job (after_job), which has none")
    target = TargetField()
    start_at = AwareDateTimeField(required=False, allow_null=True, help_text="No fires before this instant")
    end_at = AwareDateTimeField(required=False, allow_null=True, help_text="No fires after this instant")
    queue = StrictCharField(required=False, allow_blank=True, max_length=100, help_text="Celery queue; blank: default")
    priority = StrictIntegerField(
        required=False,
        min_value=PRIORITY_MIN,
        max_value=PRIORITY_MAX,
        help_text=f"{PRIORITY_MIN}-{PRIORITY_MAX}, higher first (default {PRIORITY_DEFAULT}): claimed first among "
        "the tenant's due jobs, released first from a quota wait, taken first from the broker queue",
    )
    timeout_seconds = StrictIntegerField(required=False)
    max_attempts = StrictIntegerField(required=False, max_value=32767)
    retry_backoff_seconds = StrictIntegerField(required=False)
    retry_backoff_max_seconds = StrictIntegerField(required=False)
    misfire_policy = serializers.ChoiceField(choices=[p.value for p in schedules.MisfirePolicy], required=False)
    catchup_window_seconds = StrictIntegerField(required=False)
    run_all_cap = StrictIntegerField(required=False)
    overlap_policy = serializers.ChoiceField(choices=OverlapPolicy.choices, required=False)
    jitter_seconds = StrictIntegerField(
        required=False,
        max_value=schedules.MAX_JITTER_SECONDS,
        help_text="Each fire moves later by a stable random 0..N-1 seconds; at most the shortest gap between fires",
    )
    batch = StrictBooleanField(
        required=False,
        help_text="Short, idempotent targets only: runs travel to workers in batches (one message, "
        "one statement to start and one to end many runs); a worker that dies costs the "
        "batch one lease, and its unfinished runs are retried",
    )
    # Bounds checked by the services (services.jobspec.check_pause_after_failures), whose error names the field.
    pause_after_failures = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=None,
        max_value=None,
        help_text="Pause the job after this many failed or dead runs in a row (1-1000); null: never",
    )
    # The tenant's own calendars only: the service looks the name up in the caller's tenant.
    calendar = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=64,
        trim_whitespace=False,
        help_text="A business-day calendar of the tenant, by name (/api/v1/calendars/); blank: none",
    )
    calendar_policy = serializers.ChoiceField(
        choices=[p.value for p in schedules.CalendarPolicy],
        required=False,
        help_text="A fire on a non-business day: skip (recorded as a skipped run), next_business_day or "
        "previous_business_day (the same wall time that day); default skip",
    )
    # Chains (docs/chains.md); the services check the job, the states and loops, naming the field.
    after_job = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=200,
        trim_whitespace=False,
        help_text="Run when a run of this job of the tenant (by name) ends; then the job has "
        "no schedule. Blank: not chained",
    )
    after_states = serializers.ListField(
        child=StrictCharField(max_length=16),
        required=False,
        allow_null=True,
        help_text="The parent's end states that start this job: any of succeeded, failed, dead; default [succeeded]",
    )


class JobSerializer(serializers.ModelSerializer):
    schedule = ScheduleField(source="*", read_only=True)
    target = TargetField(source="*", read_only=True)
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    calendar = serializers.SlugRelatedField(
        slug_field="name",
        read_only=True,
        allow_null=True,
        help_text="The job's business-day calendar, by name; null: none",
    )
    after_job = serializers.SlugRelatedField(
        slug_field="name",
        read_only=True,
        allow_null=True,
        help_text="The job this one runs after (chains), by name; null: none",
    )
    checkin_status = serializers.SerializerMethodField(
        help_text="A monitored job's check-in status (docs/check-ins.md): new (no fire and no ping yet), up, "
        "late (a fire waits for its ping within the grace), down (its last check-in failed or was missed) "
        "or paused; null for jobs that are not monitored",
    )

    class Meta:
        model = Job
        fields = (
            "id",
            "name",
            "description",
            "tags",
            "schedule",
            "target",
            "start_at",
            "end_at",
            "queue",
            "priority",
            "timeout_seconds",
            "max_attempts",
            "retry_backoff_seconds",
            "retry_backoff_max_seconds",
            "misfire_policy",
            "catchup_window_seconds",
            "run_all_cap",
            "overlap_policy",
            "jitter_seconds",
            "batch",
            "enabled",
            "paused_note",
            # who paused the job, when, until when and what then (resume or alert; docs/pauses.md)
            "paused_by",
            "paused_at",
            "paused_until",
            "pause_expiry",
            "next_run_at",
            "version",
            "created_at",
            "updated_at",
            # the pause after repeated failure: the setting, the count so far, and when the job paused itself
            "pause_after_failures",
            "consecutive_failures",
            "auto_paused_at",
            "managed_by",  # the owner under schedules as code ('' made by hand); edit its declaration instead
            "calendar",
            "calendar_policy",
            "after_job",
            "after_states",  # chains: the parent, and its end states that start this job
            "checkin_status",
        )
        read_only_fields = fields

    @extend_schema_field(
        serializers.ChoiceField(choices=list(checkstatus.STATUSES), allow_null=True)  # type: ignore[arg-type]
    )
    def get_checkin_status(self, job: Job) -> str | None:
        if job.target_kind != TargetKind.MONITOR:
            return None
        if not hasattr(job, "cf_latest_state"):  # one job (a write's answer): read its latest run now
            job = checkstatus.with_check_fields(Job.objects.filter(pk=job.pk)).get()
        return checkstatus.status_of(job)


class JobFilterSerializer(ListQuerySerializer):
    tag = serializers.CharField(required=False, max_length=64, help_text="Jobs carrying this tag")
    enabled = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="true: running jobs; false: paused ones"
    )
    name = serializers.CharField(required=False, max_length=200, help_text="The job with this exact name")


class PauseSerializer(StrictSerializer):
    note = StrictCharField(required=False, allow_blank=True, max_length=500, help_text="Why (kept until resumed)")
    until = AwareDateTimeField(
        required=False, allow_null=True, default=None, help_text="When the pause ends (then on_expiry happens)"
    )
    on_expiry = serializers.ChoiceField(
        choices=list(schedules.EXPIRIES),
        required=False,
        allow_blank=True,
        default="",
        help_text="At `until`: resume the job, or raise one alert (paused, not healthy); default alert",
    )


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
    anomaly = serializers.CharField(
        allow_null=True, help_text="dst_gap or dst_repeated with an explanation; null for an ordinary fire"
    )
    calendar = serializers.CharField(
        allow_null=True,
        required=False,
        help_text="What the job's calendar does to this fire: skipped (and why), or "
        "moved from which non-business days; null: nothing",
    )


class PreviewSerializer(serializers.Serializer):
    timezone = serializers.CharField()
    fires = FireSerializer(many=True)
    placement = serializers.CharField(
        allow_null=True, required=False, help_text="A flexible window's chosen time and why; null for other schedules"
    )


class SkippedFireSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    reason = serializers.CharField()


class ImpactSerializer(serializers.Serializer):
    fires_now = serializers.ListField(
        child=serializers.DateTimeField(), help_text="Fires due at once if the edit is saved"
    )
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


class BulkSerializer(PauseSerializer):
    tag = StrictCharField(max_length=64)
    action = serializers.ChoiceField(choices=services.BULK_ACTIONS)


class BulkResultSerializer(serializers.Serializer):
    tag = serializers.CharField()
    action = serializers.ChoiceField(choices=services.BULK_ACTIONS)
    count = serializers.IntegerField(help_text="How many jobs changed")
    request = serializers.IntegerField(
        required=False,
        help_text="A pause of more jobs than CRONFLEET_BULK_PAUSE_APPROVAL_OVER: the pause request waiting "
        "for a second person (pause-requests/), nothing paused yet",
    )
    fingerprint = serializers.CharField(
        required=False, help_text="The waiting request's fingerprint, which its approval names"
    )
