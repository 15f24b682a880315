"""A monitored job's status at a glance, as healthchecks shows its checks:

- new: no fire has come and no ping yet;
- up: its latest check-in succeeded, or it has pinged /start and is within its grace;
- late: a fire has come and its ping has not, and the grace has not run out;
- down: its latest check-in failed (/fail, an exit status, or missed: no ping within the
  grace), or its open fire is past its grace and the beat has not marked it missed yet;
- paused: the job is paused (whatever its runs say).

check_status() decides from the job's fields and its latest check-in run (pure: the clock is
an argument). The lists read the latest run with the jobs in one statement
(with_check_fields: correlated sub-selects, each one probe down the jobrun_one_per_fire
(job_id, scheduled_at) index), never one query per job.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import DateTimeField, IntegerField, OuterRef, QuerySet, Subquery, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Now, Substr

from scheduler_app.models import DEFAULT_GRACE_SECONDS, Job, JobRun, RunState, TargetKind

NEW, UP, LATE, DOWN, PAUSED = "new", "up", "late", "down", "paused"
STATUSES = (NEW, UP, LATE, DOWN, PAUSED)
# The runs a check-in leaves: open (waiting for a ping, started) or ended by a ping or the beat.
CHECKIN_STATES = (RunState.PENDING, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED)
MISSED_PREFIX = "missed:"  # the reason of a run the beat ended for want of a ping (dispatch/checkins.py)
BODY_SHOWN = 200  # characters of the last ping's body the lists read


@dataclass(frozen=True)
class LatestRun:
    state: str
    scheduled_at: datetime
    started_at: datetime | None = None


def check_status(*, enabled: bool, grace_seconds: int, latest: LatestRun | None, now: datetime) -> str:
    """The status of a monitored job whose newest check-in run is `latest` (None: it has none)."""
    if not enabled:
        return PAUSED
    if latest is None:
        return NEW
    if latest.state == RunState.SUCCEEDED:
        return UP
    if latest.state not in (RunState.PENDING, RunState.RUNNING):
        return DOWN
    # Open: the grace runs from its /start if it had one, else from its fire time.
    if now > (latest.started_at or latest.scheduled_at) + timedelta(seconds=grace_seconds):
        return DOWN
    return UP if latest.state == RunState.RUNNING else LATE


def _latest(field: str):
    runs = JobRun.objects.filter(job_id=OuterRef("pk"), state__in=CHECKIN_STATES).order_by("-scheduled_at")
    return Subquery(runs.values(field)[:1])


def with_check_fields(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """`jobs` with what check_status needs, in the same statement: cf_latest_state,
    cf_latest_at, cf_latest_started, cf_grace, and cf_now (the database's clock)."""
    return jobs.annotate(
        cf_now=Now(),
        cf_latest_state=_latest("state"),
        cf_latest_at=_latest("scheduled_at"),
        cf_latest_started=_latest("started_at"),
        cf_grace=Coalesce(
            Cast(KeyTextTransform("grace_seconds", "target_config"), IntegerField()), DEFAULT_GRACE_SECONDS
        ),
    )


def with_last_ping(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """`jobs` with their last ping (cf_ping_at: when; cf_ping_body: the first BODY_SHOWN
    characters of its body), in the same statement. A run the beat ended as missed was no ping."""
    pinged = (
        JobRun.objects.filter(job_id=OuterRef("pk"), state__in=(RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED))
        .exclude(reason__startswith=MISSED_PREFIX)
        .order_by("-scheduled_at")
    )
    at = pinged.annotate(at=Coalesce("finished_at", "started_at")).values("at")[:1]
    body = pinged.annotate(body=Substr("result", 1, BODY_SHOWN + 1)).values("body")[:1]
    return jobs.annotate(
        cf_ping_at=Subquery(at, output_field=DateTimeField()), cf_ping_body=Subquery(body, output_field=TextField())
    )


def status_of(job: Job, now: datetime | None = None) -> str | None:
    """The status of a job read through with_check_fields() at `now` (default: the clock its
    statement read); None for a job that is not monitored."""
    if job.target_kind != TargetKind.MONITOR:
        return None
    latest = None
    if job.cf_latest_state is not None:
        latest = LatestRun(job.cf_latest_state, job.cf_latest_at, job.cf_latest_started)
    clock = now or job.cf_now
    return check_status(enabled=job.enabled, grace_seconds=job.cf_grace, latest=latest, now=clock)


def monitored(tenant_id: int | None = None) -> QuerySet[Job]:
    jobs = Job.objects.filter(target_kind=TargetKind.MONITOR)
    return jobs if tenant_id is None else jobs.filter(tenant_id=tenant_id)


def count_by_status(now: datetime, tenant_id: int | None = None) -> dict[str, int]:
    """How many monitored jobs are in each status (every status named, zeros included): one
    statement over the monitored jobs."""
    counts: Counter[str] = Counter()
    for job in with_check_fields(monitored(tenant_id)).only("id", "enabled", "target_kind").iterator(chunk_size=2000):
        counts[status_of(job, now) or NEW] += 1
    return {status: counts[status] for status in STATUSES}
