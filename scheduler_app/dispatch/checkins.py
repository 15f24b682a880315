"""Monitored jobs in the beat: their fires wait for a check-in instead of going to a broker.

A monitored job (target kind `monitor`) runs elsewhere and pings /ping/<key>. The beat still
claims it and records one run per fire, like any job, but as `pending` "checkin: waiting for
a ping" (await_checkins, pure): no message is published. A ping closes the run
(services/checkins.py). Once a run's grace has passed with no success (from its fire time,
or from its /start), miss_checkins ends it `failed`, "missed: ...", and the alert rules see
a failed run like any other.

The sweep is one statement a turn. It reads the partial index jobrun_checkin_open_idx, which
holds only monitored runs still open (waiting or started): empty, and so one probe, when no
job is monitored; otherwise about one entry per monitored job inside its grace.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import connection, transaction

from scheduler_app.dispatch.plan import RunRow
from scheduler_app.ledger import autopause
from scheduler_app.models import CHECKIN_PREFIX, WAITING_REASON, JobRun, RunState, TargetKind
from scheduler_app.targets.monitor import DEFAULT_GRACE_SECONDS

logger = logging.getLogger("scheduler_app.dispatch")


def await_checkins(rows: list[RunRow], jobs: list[dict]) -> list[RunRow]:
    """The planned rows with a monitored job's queued fires turned into runs waiting for a
    ping (pending, WAITING_REASON). Rows of other jobs are unchanged. Pure."""
    monitored = {job["id"] for job in jobs if job["target_kind"] == TargetKind.MONITOR}
    if not monitored:
        return rows
    return [
        row._replace(state=RunState.PENDING.value, reason=WAITING_REASON)
        if row.job_id in monitored and row.state == RunState.QUEUED
        else row
        for row in rows
    ]


def missed_reason(grace_seconds: int, started: bool) -> str:
    """MISS_CHECKINS_PG's reason, in Python (the SQLite path and the docs say the same)."""
    if started:
        return f"missed: no success within {grace_seconds} s of its start"
    return f"missed: no check-in within {grace_seconds} s"


# miss_checkins (PostgreSQL)
# End as failed up to %(limit)s open check-in runs (pending: waiting for a ping; running:
# started by /start) whose grace (the job's target_config grace_seconds) has passed since
# their fire time, or since their start. The sub-select reads jobrun_checkin_open_idx (its
# predicate, state and reason prefix, is repeated word for word so the planner can use it);
# locked rows are skipped (a ping closing the run holds it), and a row a ping closed after
# the snapshot is re-checked and left alone.
_GRACE = (
    f"(SELECT coalesce(CAST(job.target_config ->> 'grace_seconds' AS integer), {DEFAULT_GRACE_SECONDS}) "
    "FROM scheduler_app_job AS job WHERE job.id = scheduler_app_jobrun.job_id)"
)
_MESSAGE = (
    f"CASE WHEN started_at IS NULL THEN 'missed: no check-in within ' || {_GRACE} || ' s' "
    f"ELSE 'missed: no success within ' || {_GRACE} || ' s of its start' END"
)
MISS_CHECKINS_PG = f"""
UPDATE scheduler_app_jobrun
   SET state = 'failed',
       finished_at = %(now)s,
       reason = {_MESSAGE},
       error = {_MESSAGE}
 WHERE id = ANY(ARRAY(
       SELECT open.id
         FROM scheduler_app_jobrun AS open
         JOIN scheduler_app_job AS job ON job.id = open.job_id
        WHERE open.state IN ('pending', 'running')
          AND substr(open.reason, 1, 8) = '{CHECKIN_PREFIX}'
          AND coalesce(open.started_at, open.scheduled_at)
              + make_interval(secs => coalesce(CAST(job.target_config ->> 'grace_seconds' AS integer),
                                               {DEFAULT_GRACE_SECONDS})) < %(now)s
        ORDER BY open.scheduled_at
        LIMIT %(limit)s
          FOR UPDATE OF open SKIP LOCKED))
   AND state IN ('pending', 'running')
RETURNING id, job_id, tenant_id
"""


def miss_checkins(now: datetime, *, limit: int) -> int:
    """End the open check-in runs whose grace has passed as failed ("missed: ..."); they
    count towards their job's pause after repeated failure. Returns how many."""
    with transaction.atomic(durable=True):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(MISS_CHECKINS_PG, {"now": now, "limit": limit})
                missed = cursor.fetchall()
        else:
            missed = _miss_checkins_orm(now, limit)
        if missed:
            logger.warning("%s check-ins missed: runs %s", len(missed), [row[0] for row in missed][:20])
            autopause.count_ends([(job_id, RunState.FAILED) for _, job_id, _ in missed], actor="beat")
    return len(missed)


def _miss_checkins_orm(now: datetime, limit: int) -> list[tuple[int, int, int]]:
    """MISS_CHECKINS_PG on SQLite (one beat at a time: the database serialises writers)."""
    missed = []
    open_runs = (
        JobRun.objects.filter(state__in=[RunState.PENDING, RunState.RUNNING], reason__startswith=CHECKIN_PREFIX)
        .select_related("job")
        .order_by("scheduled_at")
    )
    for run in open_runs:
        grace = int(run.job.target_config.get("grace_seconds", DEFAULT_GRACE_SECONDS))
        if (run.started_at or run.scheduled_at) + timedelta(seconds=grace) >= now:
            continue
        reason = missed_reason(grace, run.started_at is not None)
        if JobRun.objects.filter(id=run.id, state=run.state).update(
            state=RunState.FAILED, finished_at=now, reason=reason, error=reason
        ):
            missed.append((run.id, run.job_id, run.tenant_id))
        if len(missed) >= limit:
            break
    return missed
