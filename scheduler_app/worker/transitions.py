"""The worker's writes to a run row: each transition is one conditional UPDATE.

A run is started by a compare-and-set on (id, attempt, state = 'queued') and ended by one
on (id, attempt, state = 'running'): a duplicate delivery or a superseded attempt changes
nothing (fencing). Each statement takes its times from the database's clock and returns
what the next step needs, so a successful run costs two statements:

- START_RUNS_PG: the compare-and-set, and the job and tenant the target needs, in one
  statement (a data-modifying CTE joined to the job);
- END_RUNS_PG: the outcome, and the attempt's record appended to the run's `attempts` (its
  history: no audit row per normal transition, and no moment where the state changed but
  its record is missing). A run of a job with pause_after_failures set is ended in a
  transaction that also counts its end on the job (ledger.autopause); other runs pay nothing.

The audit trail keeps the anomalies (duplicate deliveries, stale writes, lost runs).
SQLite (the embedded first run) takes the same steps with the ORM and Python's clock, which
there is the database's. A batch of runs (one message, execution.execute_runs) is started
and ended by the same two statements, each run keeping its own row, attempt and fencing.

On PostgreSQL these statements are sent with server-side parameters and prepared once per
session (execute(), CRONFLEET_PREPARED_STATEMENTS): planning the start's CTE anew each time
cost more than running it (PostgreSQL's CPU per start 0.76 ms unprepared, 0.22 prepared).
They bypass Django's cursor wrappers, so STATEMENTS counts them (bench e2e reports it).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model
from django.db.models.base import ModelState
from django.utils import timezone

from scheduler_app.conf import app_settings
from scheduler_app.ledger import autopause, chains
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Tenant, append_attempt
from scheduler_app.worker.reconnect import drop_closed_connection

# start_runs (PostgreSQL): move each (id, attempt) still queued to running and read, in the
# same statement, every job column its target and outcome need, in the order given. A pair
# missing from the answer lost the race (a duplicate delivery, a superseded attempt).
# The state these statements expect is compared as an expression (state || ''), which
# neither an index on state nor a partial index's predicate can serve: with `state = %s`,
# a custom plan (PostgreSQL's first five executions of a prepared statement, every
# execution of an unprepared one) knows the value and may read the runs through the partial
# index of all queued (or running) runs, or (state, scheduled_at), instead of their primary
# key: O(runs in flight) per statement, 8.6 ms for a batch's end with 20,000 runs running,
# where the primary key takes under 1 ms.
START_RUNS_PG = """
WITH started AS (
    UPDATE scheduler_app_jobrun AS run
       SET state = 'running', started_at = statement_timestamp(), heartbeat_at = statement_timestamp(),
           lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s),
           worker = %(worker)s, celery_task_id = %(task_id)s
      FROM {mine}
     WHERE run.id = mine.id AND run.attempt = mine.attempt AND run.state || '' = %(queued)s
    RETURNING run.id, run.attempt, run.job_id, run.tenant_id, run.scheduled_at, run.enqueued_at, run.started_at,
              run.trigger, run.parent_run_id, mine.position
)
SELECT started.id, started.attempt, started.job_id, started.tenant_id, started.scheduled_at,
       started.enqueued_at, started.started_at, started.trigger, started.parent_run_id, tenant.slug, {tenant_columns},
       {job_columns}
  FROM started
  JOIN scheduler_app_job AS job ON job.id = started.job_id
  JOIN scheduler_app_tenant AS tenant ON tenant.id = started.tenant_id
 ORDER BY started.position
"""
# The job columns a started run carries (Started.job has these and no others).
# pause_after_failures: whether the run's end counts towards the job's pause (end_runs);
# has_children: whether its end may start runs of jobs chained after it (ledger.chains).
JOB_COLUMNS = (
    "name",
    "target_kind",
    "task_name",
    "args",
    "kwargs",
    "target_config",
    "timeout_seconds",
    "max_attempts",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "queue",
    "pause_after_failures",
    "has_children",
)
JSON_COLUMNS = {"args", "kwargs", "target_config"}
# The tenant columns a started run carries (Started.job.tenant has these, its id and slug):
# what signs a webhook (http/secrets.py), read with the start rather than by a query a group.
TENANT_COLUMNS = ("webhook_secret_encrypted", "webhook_secret_previous_encrypted", "webhook_secret_previous_until")
# Which runs a statement is about: a batch's arrays, or one run's scalars. Dumping an array
# parameter is Python work in psycopg (it inspects every element) and unnest() a function
# scan in the plan: for the one run of an unbatched message, a start with scalars took 95
# against 185 us of the worker's CPU and 155 against 540 us end to end (prepared, 2 cores).
MINE_MANY = "unnest(%(ids)s::bigint[], %(attempts)s::integer[]) WITH ORDINALITY AS mine (id, attempt, position)"
MINE_ONE = "(VALUES (%(id)s::bigint, %(attempt)s::integer, 1::bigint)) AS mine (id, attempt, position)"
_SELECTS = {
    # JSON as its text (what the text protocol sends): _started decodes it, in either format.
    "job_columns": ", ".join(
        f"job.{column}::text" if column in JSON_COLUMNS else f"job.{column}" for column in JOB_COLUMNS
    ),
    "tenant_columns": ", ".join(f"tenant.{column}" for column in TENANT_COLUMNS),
}
START_RUNS = START_RUNS_PG.format(**_SELECTS, mine=MINE_MANY)
START_RUN = START_RUNS_PG.format(**_SELECTS, mine=MINE_ONE)

# end_runs (PostgreSQL): end each attempt that still owns its run with its outcome, and
# append the attempt's record to the run's history. A retry's next attempt is due `delay`
# seconds later (NULL: none). The ending's columns are named apart from the run's: the
# record (append_attempt) reads the run's own attempt, worker and started_at. commit_mode
# sets how this statement's own transaction commits (CRONFLEET_END_SYNCHRONOUS_COMMIT: the
# setting in force at commit decides, and autocommit commits right after the statement).
END_RUNS_PG = """
UPDATE scheduler_app_jobrun
   SET state = ending.new_state, finished_at = statement_timestamp(), lease_expires_at = NULL,
       result = ending.new_result, error = ending.new_error,
       next_attempt_at = statement_timestamp() + make_interval(secs => ending.delay),
       started_at = {own_start}, attempts = {append}
  FROM {endings} AS ending (run_id, run_attempt, new_state, new_result, new_error, delay, waited),
       (SELECT set_config('synchronous_commit', %(commit)s, true)) AS commit_mode
 WHERE scheduler_app_jobrun.id = ending.run_id AND scheduler_app_jobrun.attempt = ending.run_attempt
   AND scheduler_app_jobrun.state || '' = %(running)s
RETURNING scheduler_app_jobrun.id
"""
# The endings, in the same two forms. `waited`: seconds from the start statement to the
# call of the run's target (a batch's later runs, an HTTP attempt that waited for its
# slot), so that started_at, the start lag and the attempt's record tell when it started.
ENDINGS_MANY = """unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(states)b::text[], %(results)b::text[],
              %(errors)b::text[], %(delays)s::float8[], %(waiteds)s::float8[])"""
ENDING_ONE = (
    "(VALUES (%(id)s::bigint, %(attempt)s::integer, %(state)s::text, %(result)s::text, %(error)s::text, "
    "%(delay)s::float8, %(waited)s::float8))"
)
OWN_START = "scheduler_app_jobrun.started_at + make_interval(secs => ending.waited)"
# end_run (SQLite): the same for one run, with Python's clock, which there is the database's.
END_RUN_SQLITE = """
UPDATE scheduler_app_jobrun
   SET state = %(state)s, finished_at = %(now)s, lease_expires_at = NULL,
       result = %(result)s, error = %(error)s, next_attempt_at = %(next_attempt_at)s,
       started_at = %(started_at)s, attempts = {append}
 WHERE id = %(id)s AND attempt = %(attempt)s AND state = 'running'
RETURNING id
"""
# renew_leases: extend the leases of the runs these attempts still own; returns which.
RENEW_LEASES_PG = """
UPDATE scheduler_app_jobrun AS run
   SET heartbeat_at = statement_timestamp(),
       lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s)
  FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS mine (id, attempt)
 WHERE run.id = mine.id AND run.attempt = mine.attempt AND run.state || '' = %(running)s
RETURNING run.id
"""
# count_duplicates: count a delivery that did not start its run; what each run is now.
COUNT_DUPLICATES_PG = """
UPDATE scheduler_app_jobrun SET duplicate_deliveries = duplicate_deliveries + 1
 WHERE id = ANY(%(ids)s::bigint[])
RETURNING id, job_id, tenant_id, state, attempt
"""
COUNT_DUPLICATE = """
UPDATE scheduler_app_jobrun SET duplicate_deliveries = duplicate_deliveries + 1
 WHERE id = %(id)s
RETURNING id, job_id, tenant_id, state, attempt
"""
ONLY_WHEN_ASKED = 2**31 - 1  # a psycopg prepare_threshold: a statement is prepared when asked, never by count
STATEMENTS = itertools.count()  # statements execute() has sent in this process (next() - 1)


def execute(statement: str, params: dict, *, many: bool = False, binary: bool = False):
    """Run `statement` on Django's PostgreSQL connection with server-side parameters,
    prepared on first use in the session (CRONFLEET_PREPARED_STATEMENTS); its first row (or
    all rows with `many`), in PostgreSQL's binary format with `binary`. Errors come out as
    Django's (DatabaseError), and mark the connection for its check."""
    next(STATEMENTS)
    connection.ensure_connection()
    raw = connection.connection
    prepare = app_settings.PREPARED_STATEMENTS
    if prepare and raw.prepare_threshold is None:
        # Django leaves psycopg's threshold at None (OPTIONS "prepare_threshold" unset), and
        # then psycopg prepares nothing, prepare=True included. A threshold no statement
        # reaches prepares ours and still none of Django's.
        raw.prepare_threshold = ONLY_WHEN_ASKED
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(statement, params, prepare=prepare, binary=binary)
        return cursor.fetchall() if many else cursor.fetchone()


_APPEND_ENDING = append_attempt(
    "statement_timestamp()", "ending.new_state", "ending.new_error", vendor="postgresql", started=OWN_START
)
END_RUNS = END_RUNS_PG.format(endings=ENDINGS_MANY, append=_APPEND_ENDING, own_start=OWN_START)
END_RUN = END_RUNS_PG.format(endings=ENDING_ONE, append=_APPEND_ENDING, own_start=OWN_START)


@dataclass
class Started:
    """A run this worker's attempt owns: its row's fields and its job's (JOB_COLUMNS)."""

    run: JobRun  # run.job is the job, with JOB_COLUMNS only; run.job.tenant its tenant, with TENANT_COLUMNS
    tenant: str  # the tenant's slug
    now: datetime  # the database's clock when the run started

    @property
    def job(self) -> Job:
        return self.run.job


@dataclass(frozen=True)
class Ending:
    """How an attempt ends: its state, result and error, and for a retry the backoff."""

    started: Started
    state: str
    result: str = ""
    error: str = ""
    delay: timedelta | None = None
    cause: BaseException | None = field(default=None, compare=False)  # the failure, not written
    waited: float = 0.0  # seconds from the start statement to the call of the target


def start_runs(pairs: list[tuple[int, int]], *, worker: str, task_id: str = "") -> list[Started]:
    """Move each (run id, attempt) from queued to running, in one statement on PostgreSQL;
    the runs this delivery won, in the order given."""
    # The connection kept since the last start may have been closed by a restarted server:
    # checked here, once per batch, as Django would check it before reusing it (reconnect.py).
    drop_closed_connection()
    params = {
        "worker": worker[:200],
        "task_id": task_id[:100],
        "lease": app_settings.LEASE_SECONDS,
        "queued": RunState.QUEUED.value,
    }
    if connection.vendor != "postgresql":
        return [started for pair in pairs if (started := _start_run_orm(*pair, params)) is not None]
    params.update(_one_or_many({"id": [run_id for run_id, _ in pairs], "attempt": [attempt for _, attempt in pairs]}))
    # Its rows in the binary format: psycopg's C loaders read the timestamps, where the text
    # format goes through Django's loader, in Python, for each. They are the same aware UTC
    # datetimes when USE_TZ is on (PostgreSQL's connections are in UTC then); a project
    # without it gets Django's naive ones, as from any query.
    rows = execute(START_RUN if len(pairs) == 1 else START_RUNS, params, many=True, binary=settings.USE_TZ)
    alias = connection.alias  # once: each read of `connection` goes through asgiref's Local
    tenants: dict[int, Tenant] = {}  # one instance a tenant, shared by its runs of this statement
    return [_started(row, params["worker"], alias, tenants) for row in rows]


def start_run(run_id: int, attempt: int, *, worker: str, task_id: str = "") -> Started | None:
    """Move a run from queued to running for `attempt`; None if this delivery lost the race."""
    started = start_runs([(run_id, attempt)], worker=worker, task_id=task_id)
    return started[0] if started else None


def _started(row: tuple, worker: str, alias: str, tenants: dict[int, Tenant]) -> Started:
    run_id, attempt, job_id, tenant_id, scheduled_at, enqueued_at, started_at, trigger, parent, slug, *values = row
    tenant_values, job_values = values[: len(TENANT_COLUMNS)], values[len(TENANT_COLUMNS) :]
    tenant = tenants.get(tenant_id)
    if tenant is None:
        tenant = tenants[tenant_id] = loaded(
            Tenant, alias, {"id": tenant_id, "slug": slug, **dict(zip(TENANT_COLUMNS, tenant_values, strict=True))}
        )
    job = loaded(
        Job,
        alias,
        {
            "id": job_id,
            "tenant_id": tenant_id,
            **{
                column: json.loads(value) if column in JSON_COLUMNS and isinstance(value, str) else value
                for column, value in zip(JOB_COLUMNS, job_values, strict=True)
            },
        },
    )
    run = loaded(
        JobRun,
        alias,
        {
            "id": run_id,
            "job_id": job_id,
            "tenant_id": tenant_id,
            "scheduled_at": scheduled_at,
            "enqueued_at": enqueued_at,
            "state": RunState.RUNNING.value,
            "attempt": attempt,
            "started_at": started_at,
            "worker": worker,
            "trigger": trigger,
            "parent_run_id": parent,
        },
    )
    job._state.fields_cache["tenant"] = tenant
    run._state.fields_cache["job"] = job
    return Started(run, slug, started_at)


def loaded(model: type[Model], alias: str, values: dict) -> Model:
    """An instance of `model` as a query with only(`values`) gives it, without Model.__init__:
    filling every other field's default was a third of a batched run's CPU. A field not
    given is not a silent default: Django loads it on first access (a deferred field)."""
    instance = model.__new__(model)  # type: ignore[call-overload]  # Model is Any (Django ships no types)
    instance._state = ModelState()
    instance._state.adding, instance._state.db = False, alias
    instance.__dict__.update(values)
    return instance


def _start_run_orm(run_id: int, attempt: int, params: dict) -> Started | None:
    now = timezone.now()
    won = JobRun.objects.filter(id=run_id, attempt=attempt, state=RunState.QUEUED).update(
        state=RunState.RUNNING,
        started_at=now,
        heartbeat_at=now,
        lease_expires_at=now + timedelta(seconds=params["lease"]),
        worker=params["worker"],
        celery_task_id=params["task_id"],
    )
    if not won:
        return None
    run = JobRun.objects.select_related("job", "job__tenant").get(id=run_id)
    return Started(run, run.job.tenant.slug, now)


def end_runs(endings: list[Ending]) -> set[int]:
    """Write each ending whose attempt still owns its run, in one statement on PostgreSQL;
    the run ids written. A refused write (a superseded attempt) is audited. Ends of runs
    whose job pauses after repeated failure are counted in the same transaction
    (ledger.autopause), and so are the child runs that the ends of a job with children start
    (ledger.chains); without such a job the end is its one statement, in autocommit."""
    if not endings:
        return set()
    if not any(e.started.job.pause_after_failures or e.started.job.has_children for e in endings):
        return _end_runs(endings)
    with transaction.atomic():
        written = _end_runs(endings)
        autopause.count_ends(
            (
                (e.started.run.job_id, str(e.state))
                for e in endings
                if e.started.run.id in written and e.started.job.pause_after_failures
            ),
            actor=_actor(endings[0].started.run.worker),
        )
        chains.start_children(
            chains.Ended(
                e.started.run.id,
                e.started.run.job_id,
                e.started.run.tenant_id,
                e.started.run.scheduled_at,
                str(e.state),
            )
            for e in endings
            if e.started.run.id in written and e.started.job.has_children
        )
    return written


def _end_runs(endings: list[Ending]) -> set[int]:
    if connection.vendor == "postgresql":
        rows = execute(
            END_RUN if len(endings) == 1 else END_RUNS,
            {
                **_ending_params(endings),
                "running": RunState.RUNNING.value,
                "commit": app_settings.END_SYNCHRONOUS_COMMIT,
            },
            many=True,
        )
        written = {row[0] for row in rows}
    else:
        written = {e.started.run.id for e in endings if _end_run_sqlite(e)}
    for ending in endings:
        run = ending.started.run
        if run.id not in written:
            audit(run.id, run.job_id, run.tenant_id, "run.stale_write_rejected", run.worker, attempt=run.attempt)
    return written


def _ending_params(endings: list[Ending]) -> dict:
    """END_RUN's scalars for one ending, END_RUNS's arrays for several."""
    return _one_or_many(
        {
            "id": [e.started.run.id for e in endings],
            "attempt": [e.started.run.attempt for e in endings],
            "state": [str(e.state) for e in endings],
            "result": [e.result for e in endings],
            "error": [e.error for e in endings],
            "delay": [None if e.delay is None else e.delay.total_seconds() for e in endings],
            "waited": [e.waited for e in endings],
        }
    )


def _one_or_many(columns: dict[str, list]) -> dict:
    """The parameters of the one-run form of a statement (MINE_ONE, ENDING_ONE: each column's
    value, by its name) or of its batch form (MINE_MANY, ENDINGS_MANY: each column's list,
    by its name in the plural)."""
    if len(next(iter(columns.values()))) == 1:
        return {name: values[0] for name, values in columns.items()}
    return {f"{name}s": values for name, values in columns.items()}


def end_run(started: Started, state: str, *, result: str = "", error: str = "", delay: timedelta | None = None) -> bool:
    """end_runs for one run: False when the attempt no longer owns the run."""
    return bool(end_runs([Ending(started, state, result, error, delay)]))


def _end_run_sqlite(ending: Ending) -> bool:
    adapt = connection.ops.adapt_datetimefield_value
    now = timezone.now()
    run = ending.started.run
    with connection.cursor() as cursor:
        cursor.execute(
            END_RUN_SQLITE.format(append=append_attempt("%(now)s", "%(state)s", "%(error)s", started="%(started_at)s")),
            {
                "id": run.id,
                "attempt": run.attempt,
                "state": str(ending.state),
                "result": ending.result,
                "error": ending.error,
                "now": adapt(now),
                "started_at": adapt(run.started_at + timedelta(seconds=ending.waited)),
                "next_attempt_at": None if ending.delay is None else adapt(now + ending.delay),
            },
        )
        return cursor.fetchone() is not None


def renew_leases(owned: dict[int, int]) -> set[int]:
    """Extend the lease of each run in {run id: attempt} that attempt still owns, by the
    database's clock; return the ids renewed."""
    if not owned:
        return set()
    lease = app_settings.LEASE_SECONDS
    if connection.vendor == "postgresql":
        rows = execute(
            RENEW_LEASES_PG,
            {"lease": lease, "ids": list(owned), "attempts": list(owned.values()), "running": RunState.RUNNING.value},
            many=True,
        )
        return {row[0] for row in rows}
    now = timezone.now()
    return {
        run_id
        for run_id, attempt in owned.items()
        if JobRun.objects.filter(id=run_id, attempt=attempt, state=RunState.RUNNING).update(
            heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease)
        )
    }


def count_duplicates(run_ids: list[int]) -> dict[int, tuple[int, int, str, int]]:
    """Count a delivery that did not start each run: {run id: (job id, tenant id, state,
    attempt)} of the runs as they are now (a run that does not exist is missing)."""
    if not run_ids:
        return {}
    if connection.vendor == "postgresql":
        rows = execute(COUNT_DUPLICATES_PG, {"ids": run_ids}, many=True)
    else:
        rows = []
        with connection.cursor() as cursor:
            for run_id in run_ids:
                cursor.execute(COUNT_DUPLICATE, {"id": run_id})
                rows += cursor.fetchall()
    return {run_id: rest for run_id, *rest in rows}


def audit(run_id: int, job_id: int, tenant_id: int, action: str, worker: str, **detail) -> None:
    AuditEvent.objects.create(
        tenant_id=tenant_id, job_id=job_id, run_id=run_id, action=action, actor=_actor(worker), detail=detail
    )


def _actor(worker: str) -> str:
    return f"worker:{worker}" if worker else "worker"
