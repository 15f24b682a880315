"""The "back up" alert of a monitored job: a check that was down (and said so by an alert)
pinged success again.

A successful check-in run answers the job's newest down alert (failed, or no_success) when
that alert's cause came before it: once per down alert (evaluate.py keys the alert on the down
alert's id), and never for a job that went down with no alert raised (no rule, a rule off, a
cool-down that held the alert back: the later recovery answers the alert that was raised, if it
has not been answered). Reads a handful of rows down the (job, scheduled_at) index; records
nothing (evaluate.py does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_app.models import Alert, AlertKind, Job, JobRun, RunState, TargetKind

DOWN_KINDS = (AlertKind.FAILED, AlertKind.NO_SUCCESS)
CHECKIN_UP = AlertKind.CHECKIN_UP
DOWN_STATES = (RunState.FAILED, RunState.DEAD)
LOOKBACK = timedelta(days=7)  # how far back a down streak's first failure is looked for


@dataclass(frozen=True)
class Recovery:
    down_alert_id: int
    down_since: datetime  # when its first failed check-in of the streak ended (else its alert's time)
    back_at: datetime  # when the successful ping came


def recovery_of(job: Job, run: JobRun) -> Recovery | None:
    """The recovery `run` is: a monitored job's successful run after its newest down alert's
    cause; None otherwise."""
    if job.target_kind != TargetKind.MONITOR or run.state != RunState.SUCCEEDED or run.finished_at is None:
        return None
    down = (
        Alert.objects.filter(job_id=job.id, kind__in=DOWN_KINDS)
        .order_by("-raised_at", "-id")
        .values("id", "raised_at", "run_id")
        .first()
    )
    if down is None:
        return None
    if down["run_id"] is not None:
        failed_at = JobRun.objects.filter(id=down["run_id"]).values_list("scheduled_at", flat=True).first()
        if failed_at is None or failed_at >= run.scheduled_at:
            return None  # that failure came after this success (or is gone)
    elif down["raised_at"] > run.finished_at:
        return None  # the silence was called after this success
    return Recovery(down["id"], down_since(job, run) or down["raised_at"], run.finished_at)


def down_since(job: Job, run: JobRun) -> datetime | None:
    """When the failures before `run` began: the end of the first failed run after the job's
    previous success (within LOOKBACK)."""
    earlier = JobRun.objects.filter(job_id=job.id, scheduled_at__lt=run.scheduled_at)
    previous = (
        earlier.filter(state=RunState.SUCCEEDED)
        .order_by("-scheduled_at")
        .values_list("scheduled_at", flat=True)
        .first()
    )
    failures = earlier.filter(state__in=DOWN_STATES, scheduled_at__gt=previous or run.scheduled_at - LOOKBACK)
    return failures.order_by("scheduled_at").values_list("finished_at", flat=True).first()
