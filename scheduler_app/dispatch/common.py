"""Shared by the beat's steps: locking clauses, the reasons of runs held for a quota, the
per-thread state of a beat, and the messages for run rows."""

from __future__ import annotations

import threading

from django.db import connection

from scheduler_app.dispatch.publish import RunMessage
from scheduler_app.models import Job

QUOTA_PREFIX = "quota_"  # the reason of every run held back by its tenant's quota
FIRES_REASON = "quota_fires_per_minute: waiting for room under the tenant's limit of {} fires per minute"
CONCURRENCY_REASON = "quota_concurrency: waiting for room under the tenant's limit of {} concurrent runs"
QUOTA_HELD_LABEL = "waiting for its tenant's quota"  # how active_runs reports such a run to plan_overlap


def lock_clause(of: str = "") -> str:
    if not connection.features.has_select_for_update_skip_locked:
        return ""  # SQLite: the database serialises writers
    return f"FOR UPDATE OF {of} SKIP LOCKED" if of else "FOR UPDATE SKIP LOCKED"


def one_pass() -> dict[str, str]:
    """{any_of} and {end_any}, around a sub-select of the ids a statement changes, which
    locks and limits them (sql.REQUEUE_DUE_RETRIES and its kind). On PostgreSQL it becomes
    `= ANY(ARRAY(...))`: an InitPlan, run once. With `IN (...)` the planner may run the
    sub-select again for each row it reads, and a rerun with SKIP LOCKED passes over the
    rows this statement has just changed and takes the next ones: the quota's release queued
    all seven held runs where the budget said three, once the table's statistics changed."""
    if connection.vendor == "postgresql":
        return {"any_of": "= ANY(ARRAY(", "end_any": "))"}
    return {"any_of": "IN (", "end_any": ")"}


def tenant_lock_clause() -> str:
    """A waiting lock on tenant rows: "FOR NO KEY UPDATE" (empty on SQLite)."""
    return "FOR NO KEY UPDATE" if connection.features.has_select_for_update else ""


_local = threading.local()


def messages_for(rows: list[tuple[int, int, int]]) -> list[RunMessage]:
    """Messages for (run id, attempt, job id) rows, with each job's queue, timeout and priority."""
    jobs = Job.objects.filter(id__in={row[2] for row in rows}).values("id", *RunMessage.JOB_FIELDS)
    by_id = {job["id"]: job for job in jobs}
    return [RunMessage.of(run_id, attempt, by_id[job_id]) for run_id, attempt, job_id in rows]
