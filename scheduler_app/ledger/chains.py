"""Chains: what the end of a run does to the jobs that run after its job (Job.after_job).

A run that ends in one of a child job's after_states records one run of the child, in the
transaction that wrote the end: its fire time is the parent run's (so its fire key,
fire_key(child, scheduled_at), derives from the parent's fire), its trigger `chain`, its
parent_run the run that ended. The (job, scheduled_at) unique constraint makes a second
insert for the same parent run a no-op (ON CONFLICT DO NOTHING): a redelivered parent, whose
end the compare-and-set refuses, writes nothing here at all, and a replayed parent that ends
again starts no second child.

The child waits as pending with a reason starting "quota_" (CHAIN_REASON) and a NOTIFY
wakes the beats at commit: a beat's release of quota-held runs (dispatch/quotas.py) queues
and publishes it within its tenant's dispatch quota, as a fire is admitted. The worker does
not publish it itself: publishing is the beat's floor, and this way a crash between commit
and publish loses nothing.

A paused child records its run as skipped (the reason says why), as does a child whose
overlap policy is `skip` while one of its runs is still going; other overlap policies let
the run go (docs/chains.md).

Runs end in the worker (worker/transitions.py: a run, a batch, an HTTP group) and, when
their lease ran out on their last attempt, in the beat (dispatch/recovery.py); both call
here in the transaction of the end. The worker calls only for runs of jobs whose
has_children is set (read by its start statement): a job without children costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from scheduler_app.models import ACTIVE_STATES, Job, JobRun, RunState, Trigger, db_now, fire_key
from scheduler_app.models.lifecycle import wake_beats

CHAIN_STATES = (RunState.SUCCEEDED.value, RunState.FAILED.value, RunState.DEAD.value)  # a child may run after these
DEFAULT_AFTER_STATES = [RunState.SUCCEEDED.value]
CHAIN_REASON = "quota_chain: started by run {run} of job {job}; a beat queues it within its tenant's quota"
PAUSED_REASON = "chain: job is paused; run {run} of job {job} ended {state}"
OVERLAP_REASON = "chain: overlap_policy skip: an earlier run is still going; run {run} of job {job} ended {state}"


@dataclass(frozen=True)
class Ended:
    """A run whose end was just written."""

    run_id: int
    job_id: int
    tenant_id: int
    scheduled_at: datetime
    state: str


def start_children(ended: Iterable[Ended]) -> int:
    """Record the child runs these ends start (call in the transaction that wrote the
    ends); how many were asked for (a fire already recorded is left alone)."""
    ends = [end for end in ended if end.state in CHAIN_STATES]
    if not ends:
        return 0
    by_parent: dict[int, list[dict]] = {}
    for child in Job.objects.filter(after_job_id__in={end.job_id for end in ends}).values(
        "id", "tenant_id", "after_job_id", "after_states", "enabled", "overlap_policy", "version", "priority"
    ):
        by_parent.setdefault(child["after_job_id"], []).append(child)
    wanted = [
        (end, child)
        for end in ends
        for child in by_parent.get(end.job_id, ())
        if end.state in child["after_states"] and child["tenant_id"] == end.tenant_id
    ]
    if not wanted:
        return 0
    now = db_now()
    busy = going({child["id"] for _, child in wanted if child["overlap_policy"] == "skip"})
    rows = [child_run(end, child, now, busy) for end, child in wanted]
    JobRun.objects.bulk_create(rows, ignore_conflicts=True)
    if any(row.state == RunState.PENDING for row in rows):
        wake_beats()
    return len(rows)


def child_run(end: Ended, child: dict, now: datetime, busy: set[int]) -> JobRun:
    """The run of `child` that `end` starts: pending for a beat to queue, or skipped."""
    names = {"run": end.run_id, "job": end.job_id, "state": end.state}
    state, reason, finished = RunState.PENDING, CHAIN_REASON.format(**names), None
    if not child["enabled"]:
        state, reason, finished = RunState.SKIPPED, PAUSED_REASON.format(**names), now
    elif child["id"] in busy:
        state, reason, finished = RunState.SKIPPED, OVERLAP_REASON.format(**names), now
    return JobRun(
        job_id=child["id"],
        tenant_id=child["tenant_id"],
        scheduled_at=end.scheduled_at,
        trigger=Trigger.CHAIN,
        state=state,
        reason=reason[:500],
        created_at=now,
        finished_at=finished,
        job_version=child["version"],
        priority=child["priority"],
        parent_run_id=end.run_id,
    )


def going(job_ids: set[int]) -> set[int]:
    """Which of these jobs have a run still going or waiting (jobrun_active_idx)."""
    if not job_ids:
        return set()
    return set(
        JobRun.objects.filter(job_id__in=job_ids, state__in=(RunState.PENDING, *ACTIVE_STATES)).values_list(
            "job_id", flat=True
        )
    )


def start_children_of(run_ids: list[int]) -> int:
    """start_children for runs just ended by id (the beat's dead runs): one query, and
    nothing more when none of their jobs has children."""
    if not run_ids:
        return 0
    rows = JobRun.objects.filter(id__in=run_ids, job__has_children=True).values_list(
        "id", "job_id", "tenant_id", "scheduled_at", "state"
    )
    return start_children(Ended(*row) for row in rows)


def parent_fire(run: JobRun) -> tuple[str | None, int | None]:
    """The parent's fire key and run id of a chained run ((None, None) for other runs; a
    fire key of None when the parent was pruned). One query, for chained runs only."""
    if run.parent_run_id is None:
        return None, None
    parent = JobRun.objects.filter(id=run.parent_run_id).values_list("job_id", "scheduled_at").first()
    return (fire_key(*parent) if parent else None), run.parent_run_id
