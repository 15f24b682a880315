"""The worker's writes to a run row: each transition is one conditional UPDATE.

A run is started by a compare-and-set on (id, attempt, state = 'queued') and ended by one
on (id, attempt, state = 'running'): a duplicate delivery or a superseded attempt changes
nothing (fencing). Each statement takes its times from the database's clock and returns
what the next step needs, so a successful run costs two statements:

- START_RUN_PG: the compare-and-set, and the job and tenant the target needs, in one
  statement (a data-modifying CTE joined to the job);
- FINISH_RUN: the outcome, and the attempt's record appended to the run's `attempts` (its
  history: no audit row per normal transition, and no moment where the state changed but
  its record is missing).

The audit trail keeps the anomalies (duplicate deliveries, stale writes, lost runs).
SQLite (the embedded first run) takes the same steps with the ORM and Python's clock, which
there is the database's.

On PostgreSQL these statements are sent with server-side parameters and prepared once per
session (execute()): planning the start's CTE anew each time cost more than running it.
They bypass Django's cursor wrappers, so STATEMENTS counts them (bench e2e reports it).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from scheduler_app.models import AuditEvent, Job, JobRun, RunState

# start_run (PostgreSQL): move the run to running for this attempt and read, in the same
# statement, every job column the target and the outcome need. No row: the delivery lost.
START_RUN_PG = """
WITH started AS (
    UPDATE scheduler_app_jobrun
       SET state = 'running', started_at = statement_timestamp(), heartbeat_at = statement_timestamp(),
           lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s),
           worker = %(worker)s, celery_task_id = %(task_id)s
     WHERE id = %(id)s AND attempt = %(attempt)s AND state = 'queued'
    RETURNING id, job_id, tenant_id, scheduled_at, enqueued_at, started_at, trigger
)
SELECT started.id, started.job_id, started.tenant_id, started.scheduled_at, started.enqueued_at,
       started.started_at, started.trigger, tenant.slug, {job_columns}
  FROM started
  JOIN scheduler_app_job AS job ON job.id = started.job_id
  JOIN scheduler_app_tenant AS tenant ON tenant.id = started.tenant_id
"""
# The job columns a started run carries (Started.job has these and no others).
JOB_COLUMNS = (
    "name", "target_kind", "task_name", "args", "kwargs", "target_config", "timeout_seconds",
    "max_attempts", "retry_backoff_seconds", "retry_backoff_max_seconds",
)
JSON_COLUMNS = {"args", "kwargs", "target_config"}
START_RUN = START_RUN_PG.format(job_columns=", ".join(f"job.{column}" for column in JOB_COLUMNS))

# finish_run / fail_run: end this attempt with `state` if it still owns the run. {now} is
# the database's clock; a retry's next attempt is due `delay` seconds later (NULL: none).
# The CASTs give a parameter used twice one type (server-side parameters are typed).
FINISH_RUN = """
UPDATE scheduler_app_jobrun
   SET state = CAST(%(state)s AS TEXT), finished_at = {now}, lease_expires_at = NULL,
       result = %(result)s, error = CAST(%(error)s AS TEXT), next_attempt_at = {next_attempt_at},
       attempts = {append}
 WHERE id = %(id)s AND attempt = %(attempt)s AND state = 'running'
RETURNING id
"""
# renew_leases: extend the leases of the runs these attempts still own; returns which.
RENEW_LEASES_PG = """
UPDATE scheduler_app_jobrun AS run
   SET heartbeat_at = statement_timestamp(),
       lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s)
  FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS mine (id, attempt)
 WHERE run.id = mine.id AND run.attempt = mine.attempt AND run.state = 'running'
RETURNING run.id
"""
# record_duplicate: count a delivery that did not start the run; what the run is now.
COUNT_DUPLICATE = """
UPDATE scheduler_app_jobrun SET duplicate_deliveries = duplicate_deliveries + 1
 WHERE id = %(id)s
RETURNING job_id, tenant_id, state, attempt
"""
ERROR_IN_HISTORY = 500  # characters of an attempt's error kept in its record
STATEMENTS = itertools.count()  # statements execute() has sent in this process (next() - 1)


def execute(statement: str, params: dict, *, many: bool = False):
    """Run `statement` on Django's PostgreSQL connection with server-side parameters,
    prepared on first use in the session; its first row (or all rows with `many`).
    Errors come out as Django's (DatabaseError), and mark the connection for its check."""
    import psycopg

    next(STATEMENTS)
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(statement, params, prepare=True)
        return cursor.fetchall() if many else cursor.fetchone()


def append_attempt(now: str, outcome: str, error: str) -> str:
    """SQL for `attempts` with this attempt's record appended (the row's attempt, worker and
    started_at; the SQL expressions `now`, `outcome` and `error`)."""
    fields = (f"'attempt', attempt, 'worker', worker, 'started_at', started_at, 'finished_at', {now}, "
              f"'outcome', CAST({outcome} AS TEXT), 'error', substr(CAST({error} AS TEXT), 1, {ERROR_IN_HISTORY})")
    if connection.vendor == "postgresql":
        return f"attempts || jsonb_build_array(jsonb_build_object({fields}))"
    return f"json_insert(attempts, '$[#]', json_object({fields}))"


@dataclass
class Started:
    """A run this worker's attempt owns: its row's fields and its job's (JOB_COLUMNS)."""

    run: JobRun  # run.job is the job, with JOB_COLUMNS only
    tenant: str  # the tenant's slug
    now: datetime  # the database's clock when the run started

    @property
    def job(self) -> Job:
        return self.run.job


def start_run(run_id: int, attempt: int, *, worker: str, task_id: str) -> Started | None:
    """Move a run from queued to running for `attempt`; None if this delivery lost the race."""
    params = {"id": run_id, "attempt": attempt, "worker": worker[:200], "task_id": task_id[:100],
              "lease": settings.CRONFLEET_LEASE_SECONDS}
    if connection.vendor != "postgresql":
        return _start_run_orm(params)
    row = execute(START_RUN, params)
    if row is None:
        return None
    run_id, job_id, tenant_id, scheduled_at, enqueued_at, started_at, trigger, slug, *job_values = row
    job = Job(id=job_id, tenant_id=tenant_id, **{
        column: json.loads(value) if column in JSON_COLUMNS and isinstance(value, str) else value
        for column, value in zip(JOB_COLUMNS, job_values, strict=True)
    })
    run = JobRun(id=run_id, job=job, tenant_id=tenant_id, scheduled_at=scheduled_at, enqueued_at=enqueued_at,
                 state=RunState.RUNNING, attempt=attempt, started_at=started_at, worker=params["worker"],
                 trigger=trigger)
    return Started(run, slug, started_at)


def _start_run_orm(params: dict) -> Started | None:
    now = timezone.now()
    won = JobRun.objects.filter(id=params["id"], attempt=params["attempt"], state=RunState.QUEUED).update(
        state=RunState.RUNNING, started_at=now, heartbeat_at=now,
        lease_expires_at=now + timedelta(seconds=params["lease"]), worker=params["worker"],
        celery_task_id=params["task_id"],
    )
    if not won:
        return None
    run = JobRun.objects.select_related("job", "job__tenant").get(id=params["id"])
    return Started(run, run.job.tenant.slug, now)


def end_run(started: Started, state: str, *, result: str = "", error: str = "",
            delay: timedelta | None = None) -> bool:
    """End the attempt with `state` (and, for a retry, its next attempt `delay` later);
    False when the attempt no longer owns the run (nothing written, the refusal audited)."""
    run = started.run
    params = {"id": run.id, "attempt": run.attempt, "state": state, "result": result, "error": error}
    if connection.vendor == "postgresql":
        now, next_attempt_at = "statement_timestamp()", "statement_timestamp() + make_interval(secs => %(delay)s)"
        params["delay"] = None if delay is None else delay.total_seconds()
    else:
        adapt = connection.ops.adapt_datetimefield_value
        now, next_attempt_at = "%(now)s", "%(next_attempt_at)s"
        clock = timezone.now()
        params.update(now=adapt(clock), next_attempt_at=None if delay is None else adapt(clock + delay))
    statement = FINISH_RUN.format(now=now, next_attempt_at=next_attempt_at,
                                  append=append_attempt(now, "%(state)s", "%(error)s"))
    if connection.vendor == "postgresql":
        written = execute(statement, params) is not None
    else:
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            written = cursor.fetchone() is not None
    if not written:
        audit(run.id, run.job_id, run.tenant_id, "run.stale_write_rejected", run.worker, attempt=run.attempt)
    return written


def renew_leases(owned: dict[int, int]) -> set[int]:
    """Extend the lease of each run in {run id: attempt} that attempt still owns, by the
    database's clock; return the ids renewed."""
    if not owned:
        return set()
    lease = settings.CRONFLEET_LEASE_SECONDS
    if connection.vendor == "postgresql":
        rows = execute(RENEW_LEASES_PG, {"lease": lease, "ids": list(owned), "attempts": list(owned.values())},
                       many=True)
        return {row[0] for row in rows}
    now = timezone.now()
    return {run_id for run_id, attempt in owned.items()
            if JobRun.objects.filter(id=run_id, attempt=attempt, state=RunState.RUNNING)
            .update(heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease))}


def count_duplicate(run_id: int) -> tuple[int, int, str, int] | None:
    """Count a delivery that did not start the run: (job id, tenant id, state, attempt) of
    the run now, or None if there is no such run."""
    if connection.vendor == "postgresql":
        return execute(COUNT_DUPLICATE, {"id": run_id})
    with connection.cursor() as cursor:
        cursor.execute(COUNT_DUPLICATE, {"id": run_id})
        return cursor.fetchone()


def audit(run_id: int, job_id: int, tenant_id: int, action: str, worker: str, **detail) -> None:
    AuditEvent.objects.create(tenant_id=tenant_id, job_id=job_id, run_id=run_id, action=action,
                              actor=f"worker:{worker}" if worker else "worker", detail=detail)

