"""A job that pauses itself after repeated failure (Job.pause_after_failures).

The ends of a job's runs move its count of failed or dead runs in a row
(Job.consecutive_failures): a run that ends failed or dead adds one, a succeeded run resets
it, and retrying, skipped and cancelled runs leave it alone. When the count reaches
pause_after_failures the job pauses itself (auto_pause): enabled off, auto_paused_at set,
a note naming the runs, the version bumped, the pause audited as "job.auto_paused" and a due
fire no beat has claimed recorded as skipped, as models.lifecycle.job_pause does.

Runs end in the worker (worker/transitions.py, a run or a batch) and, when their lease ran
out on their last attempt, in the beat (dispatch/recovery.py, mark_lost_runs); both call
count_ends() in the transaction that ended the runs, so a count never misses an end that
committed. Only jobs with pause_after_failures set are counted: the worker knows which from
its start statement and calls nothing for the others; the statement here touches those jobs
only and never writes a row whose count stays 0, so a job without the setting costs nothing
and its row is not written. The job row is locked for one short statement (and a pause),
never across a target's call: the beat's claim skips locked job rows, so a long lock here
would delay the job's fires.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection, transaction
from django.db.models import F

from scheduler_app.models import Job, JobRun, RunState, db_now
from scheduler_app.models.lifecycle import audit_job, skip_due_fires

FAILED = (RunState.FAILED.value, RunState.DEAD.value)
COUNTED = (RunState.SUCCEEDED.value, *FAILED)
RUNS_NAMED = 10  # at most this many run ids in a pause's note
CANDIDATES = 100  # the newest failed or dead fires among which those runs are found
ERROR_SHOWN = 200  # characters of the last run's error in the note

# count_ends (PostgreSQL): each job's tally in one statement. A tally is what a sequence of
# ends does to the count: `reset` when one of them succeeded, then the failures after the
# last success. A job whose count is 0 and stays 0 (successes only) is not written.
COUNT_ENDS_PG = """
UPDATE scheduler_app_job AS job
   SET consecutive_failures = CASE WHEN tally.reset THEN 0 ELSE job.consecutive_failures END + tally.failures
  FROM unnest(%(jobs)s::bigint[], %(resets)s::boolean[], %(failures)s::integer[]) AS tally (job_id, reset, failures)
 WHERE job.id = tally.job_id AND job.pause_after_failures IS NOT NULL
   AND (tally.failures > 0 OR job.consecutive_failures > 0)
RETURNING job.id, job.consecutive_failures, job.pause_after_failures, job.enabled
"""


def tallies(ends: Iterable[tuple[int, str]]) -> dict[int, tuple[bool, int]]:
    """{job id: (reset, failures after the last success)} of (job id, state) ends in the
    order they ended; states that do not count are left out."""
    found: dict[int, tuple[bool, int]] = {}
    for job_id, state in ends:
        if state == RunState.SUCCEEDED:
            found[job_id] = (True, 0)
        elif state in FAILED:
            reset, failures = found.get(job_id, (False, 0))
            found[job_id] = (reset, failures + 1)
    return found


def count_ends(ends: Iterable[tuple[int, str]], *, actor: str) -> list[int]:
    """Count these (job id, state) ends of runs just written on the jobs that have
    pause_after_failures set, and pause each job whose count reached it. Call in the
    transaction that ended the runs. Returns the ids of the jobs paused."""
    counted = tallies(ends)
    if not counted:
        return []
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                COUNT_ENDS_PG,
                {
                    "jobs": list(counted),
                    "resets": [r for r, _ in counted.values()],
                    "failures": [f for _, f in counted.values()],
                },
            )
            rows = cursor.fetchall()
    else:
        rows = [row for job_id, tally in counted.items() if (row := _count_one(job_id, *tally)) is not None]
    due = [job_id for job_id, count, limit, enabled in rows if enabled and limit and count >= limit]
    return [job_id for job_id in due if auto_pause(job_id, actor=actor)]


def _count_one(job_id: int, reset: bool, failures: int) -> tuple | None:
    """COUNT_ENDS_PG for one job, with the ORM (SQLite, where the job row's writer is alone)."""
    jobs = Job.objects.filter(id=job_id, pause_after_failures__isnull=False)
    if not failures:
        jobs = jobs.filter(consecutive_failures__gt=0)
    base = 0 if reset else F("consecutive_failures")
    if not jobs.update(consecutive_failures=base + failures):
        return None
    return (
        Job.objects.filter(id=job_id)
        .values_list("id", "consecutive_failures", "pause_after_failures", "enabled")
        .first()
    )


def auto_pause(job_id: int, *, actor: str, now: datetime | None = None) -> bool:
    """Pause an enabled job whose count of failed or dead runs in a row reached its
    pause_after_failures; False when it no longer qualifies (paused meanwhile, a success
    reset the count, the setting cleared)."""
    with transaction.atomic():
        job = Job.objects.select_for_update(no_key=True).filter(id=job_id, enabled=True).first()
        if job is None or not job.pause_after_failures or job.consecutive_failures < job.pause_after_failures:
            return False
        runs = failed_in_a_row(job)
        note = pause_note(job.consecutive_failures, runs)
        now = now or db_now()
        skip_due_fires([job.id])
        Job.objects.filter(id=job.id).update(
            enabled=False,
            auto_paused_at=now,
            paused_note=note,
            paused_by=actor[:200],
            paused_at=now,
            paused_until=None,
            pause_expiry="",
            pause_alerted_at=None,
            version=F("version") + 1,
        )
        audit_job(
            job,
            "job.auto_paused",
            actor,
            note=note,
            runs=[run["id"] for run in runs],
            consecutive_failures=job.consecutive_failures,
            pause_after_failures=job.pause_after_failures,
        )
    return True


def failed_in_a_row(job: Job) -> list[dict]:
    """The job's failed or dead runs that ended last, as many as its count (at most
    RUNS_NAMED), by id: the runs its count is made of, as no success ended after them. They
    are picked by when they ended (a retried fire ends after later fires) among the newest
    fires' CANDIDATES, which the (job, scheduled_at) index finds without a sort of the job's
    whole history."""
    candidates = (
        JobRun.objects.filter(job_id=job.id, state__in=FAILED)
        .order_by("-scheduled_at", "-id")
        .values("id", "state", "error", "finished_at")[:CANDIDATES]
    )
    ended = sorted(candidates, key=ended_order)
    return sorted(ended[-min(job.consecutive_failures, RUNS_NAMED) :], key=lambda run: run["id"])


def ended_order(run: dict) -> tuple:
    """Runs in the order they ended (one never ended first)."""
    return (run["finished_at"] is not None, run["finished_at"] or 0, run["id"])


def pause_note(count: int, runs: list[dict]) -> str:
    """Why the job paused itself, naming its runs and the last one's error (one line)."""
    note = f"paused after {count} failed or dead runs in a row"
    if runs:  # none when they have been pruned already
        more = f" and {count - len(runs)} earlier" if count > len(runs) else ""
        note += f": runs {', '.join(str(run['id']) for run in runs)}{more}"
        last = max(runs, key=ended_order)
        error = " ".join("".join(ch if ch.isprintable() else " " for ch in last["error"] or "").split())
        note += f" (last: {last['state']}: {error[:ERROR_SHOWN]})" if error else f" (last: {last['state']})"
    return note[:500]
