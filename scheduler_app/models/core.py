"""Jobs, the run ledger and the audit trail (tenants and their keys: models/tenants.py).
Nothing here but Django and the pure schedule types."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

from django.db import connection, models
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from scheduler_app import schedules
from scheduler_app.models.choices import TextChoices
from scheduler_app.models.tenants import Tenant


def db_now() -> datetime:
    """The database's clock: the one clock every node judges due times by.

    SQLite is embedded (same machine, same clock), so Python's clock is the database's.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()


# Job.priority: the broker's ten message priority levels, higher first (as on RabbitMQ;
# publish.broker_priority turns it round for Redis, which serves its lowest number first).
PRIORITY_MIN, PRIORITY_MAX, PRIORITY_DEFAULT = 0, 9, 5


class TargetKind(TextChoices):
    TASK = "task"  # a registered Celery task: task_name, args, kwargs
    HTTP = "http"  # target_config: method, url, headers, body
    COMMAND = "command"  # target_config: name, params (an allow-listed program)
    SQL = "sql"  # target_config: name, params (an allow-listed statement, scheduler_app/targets/sql/)
    MONITOR = "monitor"  # target_config: grace_seconds; runs elsewhere and pings in (models/checkins.py)


class OverlapPolicy(TextChoices):
    ALLOW = "allow"  # every fire runs, whatever is still running
    SKIP = "skip"  # a fire while an earlier run is active is recorded as skipped
    BUFFER_ONE = "buffer_one"  # hold one fire (pending) until the active run ends; skip the rest
    REPLACE = "replace"  # cancel the active run and run the new fire


class JobQuerySet(models.QuerySet):
    def due(self, now: datetime) -> JobQuerySet:
        """Enabled jobs whose next fire time has passed, oldest first (dispatch's claim)."""
        return self.filter(enabled=True, next_run_at__lte=now).order_by("next_run_at", "id")

    def tagged(self, tag: str) -> JobQuerySet:
        """Jobs whose tags hold `tag`: jsonb containment on PostgreSQL."""
        if connection.features.supports_json_field_contains:
            return self.filter(tags__contains=[tag])
        # SQLite has no JSON containment; json_each finds the element exactly.
        return self.filter(
            id__in=RawSQL(
                "SELECT job.id FROM scheduler_app_job job, json_each(job.tags) tag WHERE tag.value = %s", [tag]
            )
        )


# Jobs whose runs follow a retention of their own rather than their tenant's.
JOB_RETENTION_SET = (
    Q(retention_days__isnull=False) | Q(retention_failed_days__isnull=False) | Q(retention_keep_last__isnull=False)
)


JOB_NAME_UNIQUE = "job_name_unique_per_tenant"  # services tell a name taken from other errors by it


class Job(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True)

    # Schedule: exactly one of cron / every_seconds / run_at (see schedules.Schedule).
    cron = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    every_seconds = models.PositiveIntegerField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True, help_text="One-off fire time")
    anchor_at = models.DateTimeField(null=True, blank=True, help_text="Intervals count from here")
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    jitter_seconds = models.PositiveIntegerField(
        default=0,
        help_text="Each fire moves later by a stable random 0..N-1 seconds (spreads many jobs on one expression)",
    )
    # Drawn once when the job is made: its fires' jitter offsets derive from it (schedules.jitter_offset).
    jitter_seed = models.PositiveIntegerField(default=0, editable=False)
    # A business-day calendar of the tenant (models/calendars.py) and what a fire on another
    # day does. PROTECT: deleting a calendar in use is refused, since dropping it quietly
    # would make a payroll job fire on a holiday. No database constraint (adding one to the
    # live job table checks every row while writes wait); the ORM's PROTECT and the
    # services' checks hold it, job_calendar_idx finds a calendar's jobs.
    calendar = models.ForeignKey(
        "scheduler_app.Calendar",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="jobs",
        db_index=False,
        db_constraint=False,
    )
    calendar_policy = models.CharField(
        max_length=24,
        blank=True,
        choices=[(p.value, p.value) for p in schedules.CalendarPolicy],
        default=schedules.CalendarPolicy.SKIP.value,
        db_default=schedules.CalendarPolicy.SKIP.value,
        help_text="A fire on a non-business day of the calendar: skip it, or run it on the next or previous business day",
    )

    # Chains (docs/chains.md): a job that runs when a run of `after_job` ends in one of
    # `after_states`, once per parent run, and has no schedule of its own. RESTRICT: deleting
    # a parent is refused while its children stay (a child without its parent would never
    # run again), deleting both at once (a tenant, a tag) is not. No database constraint
    # (adding one to the live job table checks every row while writes wait); job_after_idx
    # finds a job's children. has_children, kept by services/chains.py at every save, lets
    # a run's end statement know without a query whether it has children to start.
    after_job = models.ForeignKey(
        "self",
        on_delete=models.RESTRICT,
        null=True,
        blank=True,
        related_name="children",
        db_index=False,
        db_constraint=False,
        help_text="Run when a run of this job ends (a chained job has no schedule)",
    )
    after_states = models.JSONField(
        default=list,
        blank=True,
        db_default=models.Value([], models.JSONField()),
        help_text="The parent's end states that start this job: succeeded, failed, dead",
    )
    has_children = models.BooleanField(default=False, db_default=False, editable=False)

    # A flexible window (docs/flexible-windows.md): "daily 01:00-03:00" or "hourly" in the job's
    # zone. The minute placed in it is stored as `cron` (a fixed-time expression, so every path
    # treats the job as any cron job) and moves only when the window itself is edited or on
    # `jobs rebalance`; flex_note says why that minute. flex_scope: whose planned fires the
    # placement avoided, the tenant's or the queue's ("" for jobs without a window).
    flex_window = models.CharField(
        max_length=40,
        blank=True,
        default="",
        db_default="",
        help_text="Fire once in this window at its least loaded minute: "
        "'daily HH:MM-HH:MM' or 'hourly'; blank: a fixed schedule",
    )
    flex_scope = models.CharField(
        max_length=8, blank=True, default="", db_default="", choices=[("tenant", "tenant"), ("queue", "queue")]
    )
    flex_note = models.CharField(max_length=300, blank=True, default="", db_default="", editable=False)

    enabled = models.BooleanField(default=True, help_text="Paused jobs do not fire")
    paused_note = models.CharField(max_length=500, blank=True)
    # Who paused the job and when; until when and what then (docs/pauses.md): at paused_until
    # the beats' pass (alerts/pauses.py) resumes the job or raises one pause_expired alert,
    # stamping pause_alerted_at so that no beat raises it again.
    paused_by = models.CharField(max_length=200, blank=True, default="", db_default="", editable=False)
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    paused_until = models.DateTimeField(null=True, blank=True, editable=False)
    # "resume" or "alert" (schedules.EXPIRIES) when paused_until is set, else "".
    pause_expiry = models.CharField(max_length=8, blank=True, default="", db_default="", editable=False)
    pause_alerted_at = models.DateTimeField(null=True, blank=True, editable=False)
    next_run_at = models.DateTimeField(null=True, blank=True)  # UTC; NULL when nothing is left to fire

    # Target
    target_kind = models.CharField(max_length=16, choices=TargetKind.choices, default=TargetKind.TASK)
    task_name = models.CharField(max_length=200, blank=True)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    target_config = models.JSONField(default=dict, blank=True, help_text="For http, command and sql targets")
    queue = models.CharField(max_length=100, blank=True, help_text="Celery queue; blank for the default")
    priority = models.PositiveSmallIntegerField(
        default=PRIORITY_DEFAULT,
        help_text=f"{PRIORITY_MIN}-{PRIORITY_MAX}; higher goes first: claimed first among its tenant's due jobs, "
        "released first from a quota wait, and taken first from the broker queue",
    )
    timeout_seconds = models.PositiveIntegerField(default=300)
    # Short, idempotent targets: the beat sends up to CRONFLEET_RUN_BATCH_SIZE runs of the
    # same queue and target kind in one message, started and finished one statement each.
    batch = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Run in batches with other short runs of the same queue (for short, idempotent "
        "targets: a worker that dies costs the batch one lease)",
    )

    # Retries: attempt n+1 waits backoff * 2**(n-1) seconds (capped), with up to 10% jitter.
    max_attempts = models.PositiveSmallIntegerField(default=3)
    retry_backoff_seconds = models.PositiveIntegerField(default=10)
    retry_backoff_max_seconds = models.PositiveIntegerField(default=3600)

    misfire_policy = models.CharField(
        max_length=16,
        choices=[(p.value, p.value) for p in schedules.MisfirePolicy],
        default=schedules.MisfirePolicy.RUN_ONCE.value,
    )
    catchup_window_seconds = models.PositiveIntegerField(default=86400)
    run_all_cap = models.PositiveIntegerField(default=100)

    overlap_policy = models.CharField(
        max_length=16,
        choices=OverlapPolicy.choices,
        default=OverlapPolicy.ALLOW,
        help_text="A fire while an earlier run is still active: allow it, skip it, hold one, or cancel the old",
    )

    # Retention of the job's finished runs, over its tenant's (scheduler_app.ledger.retention); NULL: the tenant's.
    retention_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Days finished runs are kept (0: forever); blank: the tenant's"
    )
    retention_failed_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Days failed and dead runs are kept, at least as long as the others "
        "(0: forever); blank: the tenant's",
    )
    retention_keep_last = models.PositiveIntegerField(
        null=True, blank=True, help_text="The job's newest runs kept whatever their age (0: none); blank: the tenant's"
    )

    # Pause after repeated failure: the job pauses itself (auto_paused_at set, the note saying
    # which runs) once this many of its runs in a row ended failed or dead; NULL: never.
    pause_after_failures = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Pause the job after this many failed or dead runs in a row; blank: never"
    )
    consecutive_failures = models.PositiveIntegerField(default=0, db_default=0, editable=False)
    auto_paused_at = models.DateTimeField(null=True, blank=True, editable=False)

    # Schedules as code: the owner whose declaration manages the job ("" when made by hand),
    # and the digest of the declaration last applied, against which edits show as drift.
    managed_by = models.CharField(max_length=100, blank=True, default="", db_default="", editable=False)
    managed_digest = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)

    version = models.PositiveIntegerField(default=1, help_text="Bumped on every edit")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name=JOB_NAME_UNIQUE),
            models.CheckConstraint(condition=Q(priority__lte=PRIORITY_MAX), name="job_priority_in_range"),
        ]
        indexes = [
            # dispatch.claim_due_jobs() reads only enabled jobs with a fire time left, oldest first;
            # the beat's sleep also asks this index for the earliest next_run_at.
            models.Index(
                fields=["next_run_at", "id"],
                name="job_due_idx",
                condition=Q(enabled=True, next_run_at__isnull=False),
            ),
            # The fair ranking (sql._FAIR_RANKING_PG) reads each tenant's due jobs one priority
            # level at a time, as a range (tenant, priority, next_run_at <= now) in
            # (next_run_at, id) order, and stops at what it lists.
            models.Index(
                fields=["tenant", "priority", "next_run_at", "id"],
                name="job_tenant_due_idx",
                condition=Q(enabled=True, next_run_at__isnull=False),
            ),
            # alerts.pauses.expire_pauses() reads the paused jobs whose pause ran out, by expiry.
            models.Index(
                fields=["paused_until"],
                name="job_pause_expiry_idx",
                condition=Q(enabled=False, paused_until__isnull=False, pause_alerted_at__isnull=True),
            ),
            # Deleting a calendar (PROTECT) and editing one (next fires again) find its jobs.
            models.Index(fields=["calendar"], name="job_calendar_idx", condition=Q(calendar__isnull=False)),
            # A job's children (chains): a run's end, the checks of a save, the job page.
            models.Index(fields=["after_job"], name="job_after_idx", condition=Q(after_job__isnull=False)),
            # jobspec.check_queue_tenant() asks whether another tenant's jobs use a named queue;
            # flexible.scope_jobs() reads a named queue's jobs.
            models.Index(fields=["queue", "tenant"], name="job_queue_tenant_idx", condition=~Q(queue="")),
            # retention.Pruner lists the few jobs with a retention of their own (JOB_RETENTION_SET).
            models.Index(
                fields=["tenant", "id"],
                name="job_retention_idx",
                condition=JOB_RETENTION_SET,
            ),
        ]

    def __str__(self) -> str:
        # tenant/job, as the CLI and API name it (select_related("tenant") where many are shown).
        return f"{self.tenant.slug}/{self.name}"

    @property
    def schedule(self) -> schedules.Schedule:
        """The job's Schedule, with its calendar's dates (one query for the calendar)."""
        calendar = self.calendar.business_calendar(timezone.now().year) if self.calendar_id else None
        return schedule_of(
            self.cron,
            self.timezone,
            self.every_seconds,
            self.run_at,
            self.anchor_at,
            self.start_at,
            self.end_at,
            self.jitter_seconds,
            self.jitter_seed,
            calendar,
            self.calendar_policy,
        )


def schedule_of(
    cron, tz, every, run_at, anchor_at, start_at, end_at, jitter=0, jitter_seed=0, calendar=None, calendar_policy="skip"
) -> schedules.Schedule:
    """The pure Schedule for a job's columns (also used on rows read by raw SQL); `calendar`
    is the BusinessCalendar of its calendar, if any."""
    return schedules.Schedule(
        cron=cron or "",
        timezone=tz or "UTC",
        every=every,
        at=run_at,
        anchor=anchor_at,
        start_at=start_at,
        end_at=end_at,
        jitter=jitter or 0,
        jitter_seed=jitter_seed or 0,
        calendar=calendar,
        calendar_policy=calendar_policy or "skip",
    )


def misfire_rules_of(policy: str, grace: timedelta, catchup_window_seconds: int, run_all_cap: int):
    return schedules.MisfireRules(
        policy=schedules.MisfirePolicy(policy),
        grace=grace,
        catchup_window=timedelta(seconds=catchup_window_seconds),
        run_all_cap=run_all_cap,
    )


class RunState(TextChoices):
    PENDING = "pending"  # recorded, held back (not yet published)
    QUEUED = "queued"  # recorded and published to the broker
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed and not retryable
    RETRYING = "retrying"  # failed; the beat re-queues it at next_attempt_at
    DEAD = "dead"  # failed on its last attempt
    SKIPPED = "skipped"  # never ran; `reason` says why
    CANCELLED = "cancelled"
    LOST = "lost"  # its worker died


ACTIVE_STATES = (RunState.QUEUED, RunState.RUNNING, RunState.RETRYING)  # a run "still going"
TERMINAL_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD, RunState.SKIPPED, RunState.CANCELLED)


class Trigger(TextChoices):
    SCHEDULE = "schedule"
    MANUAL = "manual"
    BACKFILL = "backfill"
    CHAIN = "chain"  # started by the end of a run of the job's after_job (parent_run)


class JobRun(models.Model):
    """The ledger: one row per fire time of a job, whatever became of it.

    db_default values let dispatch insert rows with a short raw INSERT.
    """

    # No index of its own: jobrun_one_per_fire (job_id, scheduled_at) serves every lookup by
    # job, and a second index with an entry at each job's own place cost every recorded run
    # (and every update of one) a random page more: +19% of dispatch CPU at 10,000,000 runs.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs", db_index=False)
    # No index of its own either: jobrun_tenant_state_idx (tenant_id, state) and
    # jobrun_tenant_recent_idx (tenant_id, scheduled_at) lead with it.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="runs", db_index=False)
    scheduled_at = models.DateTimeField()  # the fire time, UTC
    trigger = models.CharField(
        max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULE, db_default=Trigger.SCHEDULE
    )
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    attempt = models.PositiveIntegerField(default=1, db_default=1)
    # A chained run's parent: the run whose end started it. DO_NOTHING and no database
    # constraint, like AuditEvent.run_id: deleting runs stays one statement, and a parent
    # pruned before its child leaves the id behind (shown as pruned).
    parent_run = models.ForeignKey(
        "self",
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        related_name="child_runs",
        db_index=False,
        db_constraint=False,
    )
    reason = models.CharField(max_length=500, blank=True, default="", db_default="")
    job_version = models.PositiveIntegerField(default=1, db_default=1)
    # The job's priority when the run was recorded: quota-held runs are released by it.
    priority = models.PositiveSmallIntegerField(default=PRIORITY_DEFAULT, db_default=PRIORITY_DEFAULT)

    created_at = models.DateTimeField()
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # When the run first went to the broker (a republish or a retry leaves it alone): the
    # fires-per-minute quota counts these. NULL while it waits as pending.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    worker = models.CharField(max_length=200, blank=True, default="", db_default="")
    celery_task_id = models.CharField(max_length=100, blank=True, default="", db_default="")
    result = models.TextField(blank=True, default="", db_default="")
    error = models.TextField(blank=True, default="", db_default="")
    duplicate_deliveries = models.PositiveIntegerField(default=0, db_default=0)
    # Every finished attempt, oldest first: {"attempt", "worker", "started_at",
    # "finished_at", "outcome", "error"}; written by the statement that ends the attempt
    # (scheduler_app.worker.transitions, sql.append_attempt), so the history costs no extra row.
    attempts = models.JSONField(default=list, blank=True, db_default=models.Value([], models.JSONField()))

    class Meta:
        constraints = [
            # One run per fire time: the safety net under the SKIP LOCKED claim
            # (dispatch.insert_runs relies on it with ON CONFLICT DO NOTHING). Retention
            # reads a job's newest runs and walks its history through it.
            models.UniqueConstraint(fields=["job", "scheduled_at"], name="jobrun_one_per_fire"),
        ]
        indexes = [
            # dispatch.requeue_due_retries() reads retrying runs by next attempt time.
            models.Index(fields=["next_attempt_at"], name="jobrun_retry_idx", condition=Q(state="retrying")),
            # Overlap checks (dispatch.plan_overlap, release_buffered_runs) look up a job's
            # active runs; the partial index stays as small as the work in flight.
            models.Index(
                fields=["job"],
                name="jobrun_active_idx",
                condition=Q(state__in=["pending", "queued", "running", "retrying"]),
            ),
            # dispatch.mark_lost_runs() reads running runs by lease expiry.
            models.Index(fields=["lease_expires_at"], name="jobrun_lease_idx", condition=Q(state="running")),
            # dispatch.republish_stale_runs() reads queued runs by publish time.
            models.Index(fields=["enqueued_at"], name="jobrun_queued_idx", condition=Q(state="queued")),
            # Quotas: a tenant's fires in the last minute, its runs in flight, its held runs.
            models.Index(
                fields=["tenant", "dispatched_at"],
                name="jobrun_tenant_dispatched_idx",
                condition=Q(dispatched_at__isnull=False),
            ),
            models.Index(
                fields=["tenant"], name="jobrun_tenant_in_flight_idx", condition=Q(state__in=["queued", "running"])
            ),
            models.Index(
                fields=["tenant", "-priority", "scheduled_at", "id"],
                name="jobrun_tenant_held_idx",
                condition=Q(state="pending"),
            ),
            # Admin, `jobs runs` and per-tenant views list runs newest first; retention walks
            # a tenant's history oldest first (a run finishes after its fire time, so runs
            # finished before a cutoff lie below it here: no index of finished_at is needed).
            models.Index(fields=["tenant", "-scheduled_at"], name="jobrun_tenant_recent_idx"),
            models.Index(fields=["state", "-scheduled_at"], name="jobrun_state_recent_idx"),
            # The admin ledger's capped count with a tenant and a state filter, read from the
            # index alone (without it: 10,001 heap fetches scattered over the tenant's pages,
            # 0.6-1.7 s at 10,000,000 runs; with it under 5 ms). It replaces the foreign key's
            # (tenant_id) index: deduplicated, 68 MB against that one's 62 MB at 10,000,000 runs,
            # and no extra write (every non-HOT update of a run already wrote both).
            models.Index(fields=["tenant", "state"], name="jobrun_tenant_state_idx"),
            # The admin's ledger filtered to manual or backfilled runs, newest first. Partial: the
            # beats' scheduled runs (nearly all of them) never enter it, so it costs them nothing.
            models.Index(fields=["-scheduled_at"], name="jobrun_triggered_idx", condition=~Q(trigger="schedule")),
            # A run's children (chains), for its page. Partial: other runs never enter it.
            models.Index(fields=["parent_run"], name="jobrun_parent_idx", condition=Q(parent_run__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of job {self.job_id} at {self.scheduled_at:%Y-%m-%d %H:%M:%S}Z"

    @property
    def fire_key(self) -> str:
        return fire_key(self.job_id, self.scheduled_at)


ERROR_IN_HISTORY = 500  # characters of an attempt's error kept in its record


def append_attempt(
    now: str, outcome: str, error: str, *, vendor: str | None = None, started: str = "started_at"
) -> str:
    """SQL for `attempts` with this attempt's record appended (the row's attempt and worker;
    the SQL expressions `started` (default: the row's started_at), `now`, `outcome` and
    `error`), in the dialect of `vendor` (default: the connection's)."""
    fields = (
        f"'attempt', attempt, 'worker', worker, 'started_at', {started}, 'finished_at', {now}, "
        f"'outcome', CAST({outcome} AS TEXT), 'error', substr(CAST({error} AS TEXT), 1, {ERROR_IN_HISTORY})"
    )
    if (vendor or connection.vendor) == "postgresql":
        return f"attempts || jsonb_build_array(jsonb_build_object({fields}))"
    return f"json_insert(attempts, '$[#]', json_object({fields}))"


def fire_key(job_id: int, scheduled_at: datetime) -> str:
    """A stable key for one fire of one job: the same on every attempt."""
    return f"job{job_id}@{_fire_stamp(scheduled_at.astimezone(UTC))}"


@functools.lru_cache(maxsize=1024)
def _fire_stamp(at_utc: datetime) -> str:
    """A UTC instant as fire keys write it, kept: the runs of one fire time (a minute's
    crons, a spike) share it, and strftime costs more than the rest of the key. Keyed on
    UTC, where no two instants compare equal (a zone's repeated hour would)."""
    return at_utc.strftime("%Y%m%dT%H%M%S.%fZ")


def celery_task_id(run_id: int, attempt: int) -> str:
    """Deterministic Celery task ids: one per (run, attempt), so a republish keeps its id."""
    return f"cronfleet-run-{run_id}-{attempt}"


class AuditEvent(models.Model):
    """Who changed which job how, and how runs moved between states."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_events")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    job_name = models.CharField(max_length=200, blank=True)  # survives the job's deletion
    # A plain id, not a foreign key: deleting a job then deletes its runs in one statement
    # instead of loading each run to null its audit rows; the audit keeps the run id.
    run_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    action = models.CharField(max_length=40)  # job.created, job.paused, run.succeeded, ...
    actor = models.CharField(max_length=200, blank=True)  # "cli", "admin:alice", "worker:w1@host"
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="audit_tenant_recent_idx"),
            models.Index(fields=["job", "-created_at"], name="audit_job_recent_idx"),
            # retention prunes events about runs by their own age; operators' actions stay.
            models.Index(fields=["created_at"], name="audit_run_created_idx", condition=Q(run_id__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor or '?'}"
