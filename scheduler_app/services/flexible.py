"""Flexible windows, the database side: a job's scope read as groups of planned fires, the job
placed at its window's least loaded minute, and `jobs rebalance` placing a scope's flexible
jobs again. The arithmetic is schedules/placement.py; docs/flexible-windows.md is the guide.

The scope's load is read as one row per distinct schedule (GROUP BY cron, zone, jitter),
never one row per job, so placing the ten-thousandth job of a tenant costs about what the
first did. What it counts, and what it leaves out, is said in neighbours_of().
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Count, F, Q, QuerySet, When
from django.db.models.functions import Coalesce

from scheduler_app import schedules
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import Job, Tenant, db_now
from scheduler_app.models.lifecycle import audit_job
from scheduler_app.services.common import lock_names
from scheduler_app.validation import InvalidInput

logger = logging.getLogger(__name__)

FLEX_SCOPES = ("tenant", "queue")
DEFAULT_SCOPE = "tenant"
MAX_NOTE = 300  # Job.flex_note


@dataclass(frozen=True)
class Placement:
    """Where a flexible job fires: the cron expression in its zone, and why there."""

    cron: str
    note: str


def check_window(text) -> schedules.Window:
    try:
        return schedules.parse_window(text)
    except schedules.InvalidSchedule as exc:
        raise InvalidInput(exc.field, exc.message) from None


def check_scope(value) -> str:
    if value in (None, ""):
        return DEFAULT_SCOPE
    if value not in FLEX_SCOPES:
        raise InvalidInput("flex_scope", f"must be one of {', '.join(FLEX_SCOPES)} (whose planned fires to avoid)")
    return value


def scope_jobs(tenant_id: int, queue: str, scope: str, *, own_only: bool = False) -> QuerySet:
    """The enabled jobs with a schedule of their own whose fires a placement in `scope` avoids:
    the tenant's, or every tenant's on the same Celery queue (own_only: the tenant's there)."""
    jobs = Job.objects.filter(enabled=True, after_job__isnull=True)
    if scope == "queue":
        jobs = jobs.filter(queue=queue)
        return jobs.filter(tenant_id=tenant_id) if own_only else jobs
    return jobs.filter(tenant_id=tenant_id)


def neighbours_of(jobs: QuerySet, ranges: list[tuple[datetime, datetime]]) -> schedules.Neighbours:
    """The planned fires of `jobs` over `ranges`, read as groups of jobs sharing a schedule.

    Counted: cron jobs (flexible ones included: their placed minute is their cron), with
    their jitter spread; intervals of a minute or more; one-offs in the ranges. Left out, as
    approximations: intervals under a minute (they fire in every minute of a window alike,
    so they cannot change which minute is least loaded), business-day calendars (a job that
    skips a holiday still counts), and the exact bounds of jobs that start or end inside
    the ranges (a job ended before the first range, or starting after the last, is left out).
    """
    begin, end = ranges[0][0], ranges[-1][1]
    # One pass over the scope's rows: each kind of schedule in columns of its own, the others
    # NULL, so a group is one distinct schedule (and what counts for nothing is one group).
    counted = Q(every_seconds__gte=60)
    rows = (
        jobs.exclude(end_at__lt=begin)
        .exclude(start_at__gte=end)
        .order_by()
        .annotate(
            every=Case(When(counted, then=F("every_seconds"))),
            first=Case(When(counted, then=Coalesce("start_at", "anchor_at"))),
            once=Case(When(Q(run_at__gte=begin, run_at__lt=end), then=F("run_at"))),
        )
        .values("cron", "timezone", "jitter_seconds", "every", "first", "once")
        .annotate(count=Count("id"))
    )
    crons, intervals, once = [], [], []
    for row in rows:
        if row["cron"]:
            crons.append((row["cron"], row["timezone"], row["jitter_seconds"], row["count"]))
        elif row["every"] is not None and row["first"] is not None:
            intervals.append((row["every"], row["first"].replace(microsecond=0), row["count"]))
        elif row["once"] is not None:
            once.append((row["once"], row["count"]))
    return schedules.Neighbours(crons=crons, intervals=intervals, once=once)


def lock_placements(tenant_ids: Iterable[int], queues: Iterable[str] = ()) -> None:
    """Serialise the placements that read the same load, until the caller's transaction ends:
    the tenants' locks (every placement of one of a tenant's jobs takes its tenant's), then the
    queues' (queue-scope placements), each set in sorted order, so that no two lockers wait on
    each other. A placement read after the lock sees the job the previous holder placed, so two
    jobs added at the same moment take two minutes, not one.

    PostgreSQL transaction advisory locks (common.lock_names): nothing else waits on them (the
    tenant's row, which the beat's quota reads share, is left alone). Other databases place
    without the lock.
    """
    lock_names(
        [
            *(f"cronfleet.flex.tenant:{tenant_id}" for tenant_id in sorted(set(tenant_ids))),
            *(f"cronfleet.flex.queue:{queue}" for queue in sorted(set(queues))),
        ]
    )


def scope_label(tenant: Tenant, queue: str, scope: str) -> str:
    if scope == "queue":
        return f"queue {queue!r}" if queue else "the default queue"
    return f"tenant {tenant.slug}"


def profile_for(
    tenant: Tenant,
    *,
    window: schedules.Window,
    zone_name: str,
    scope: str,
    queue: str,
    now: datetime,
    exclude_ids=(),
    own_only: bool = False,
) -> list[float]:
    """The planned fires per minute of `window` of the scope's jobs but `exclude_ids`."""
    jobs = scope_jobs(tenant.id, queue, scope, own_only=own_only).exclude(id__in=list(exclude_ids))
    neighbours = neighbours_of(jobs, window.occurrences(zone_name, now))
    return schedules.load_profile(window, zone_name, now, neighbours)


def placed(
    window: schedules.Window,
    zone_name: str,
    profile: list[float],
    *,
    key: str,
    label: str,
    now: datetime,
    shown: list[float] | None = None,
) -> Placement:
    """The least loaded minute of `profile` as a Placement, with the sentence that explains it.
    `shown`: the counts the sentence may tell (a tenant's own jobs', when `profile` holds other
    tenants' too); the choice is still `profile`'s."""
    bucket = schedules.choose_minute(profile, key)
    days = window.horizon_days
    over = f"over the next {days} day{'s' if days > 1 else ''}"
    if shown is None:
        told = (
            f"{schedules.load_text(profile[bucket])} planned fires in that minute {over}, the fewest of "
            f"the window's {window.length} minutes (busiest: {schedules.load_text(max(profile))}; {label})"
        )
    else:
        told = (
            f"the least loaded of the window's {window.length} minutes on {label} {over}; "
            f"of this tenant's jobs, {schedules.load_text(shown[bucket])} planned fires in that minute "
            f"(busiest: {schedules.load_text(max(shown))})"
        )
    note = f"{window.time_text(bucket)} {zone_name}, chosen in {window.text} on {now:%Y-%m-%d}: {told}"
    return Placement(cron=window.cron_at(bucket), note=note[:MAX_NOTE])


def place(
    tenant: Tenant,
    *,
    window: schedules.Window,
    zone_name: str,
    scope: str,
    queue: str,
    name: str,
    now: datetime,
    exclude_ids=(),
    across_tenants: bool = False,
) -> Placement:
    """Place a job named `name` of `tenant` in `window`: its scope's least loaded minute.

    A queue scope chooses among every tenant's jobs on the queue, but unless across_tenants
    (staff previews) the note tells the counts of the tenant's own jobs only: the note is the
    tenant's to read, and another tenant's planned fires per minute are not (issue 40)."""
    where = dict(window=window, zone_name=zone_name, scope=scope, queue=queue, now=now, exclude_ids=exclude_ids)
    profile = profile_for(tenant, **where)
    shown = profile_for(tenant, **where, own_only=True) if scope == "queue" and not across_tenants else None
    label = scope_label(tenant, queue, scope)
    return placed(window, zone_name, profile, key=f"{tenant.slug}/{name}", label=label, now=now, shown=shown)


def spec_placed(
    tenant: Tenant,
    spec,
    now: datetime,
    *,
    kept: Placement | None = None,
    exclude_id: int | None = None,
    across_tenants: bool = False,
):
    """(spec with its window placed as its cron, the job's flex_* fields) for a JobSpec with a
    flex_window. `kept` is the job's stored placement, kept when an edit leaves the window,
    its zone and its scope alone; else the job is placed now (without `exclude_id`, itself).
    across_tenants: the note tells a queue's counts over every tenant (place())."""
    given = [field for field in ("cron", "every", "at") if getattr(spec, field) not in (None, "")]
    if given:
        raise InvalidInput(
            "flex_window",
            f"give a window or a schedule ({given[0]}), not both: the window places the job's fire itself",
        )
    if spec.jitter_seconds:
        raise InvalidInput("jitter_seconds", "must be 0 with a flex_window: the window places the fire itself")
    window, scope = check_window(spec.flex_window), check_scope(spec.flex_scope)
    zone_name = spec.timezone or tenant.timezone
    try:
        schedules.zone(zone_name)
    except schedules.InvalidSchedule as exc:
        raise InvalidInput(exc.field, exc.message) from None
    chosen = kept or place(
        tenant,
        window=window,
        zone_name=zone_name,
        scope=scope,
        queue=spec.queue or "",
        name=spec.name,
        now=now,
        exclude_ids=[exclude_id] if exclude_id else (),
        across_tenants=across_tenants,
    )
    fields = {"flex_window": window.text, "flex_scope": scope, "flex_note": chosen.note}
    return replace(spec, cron=chosen.cron, timezone=zone_name), fields


def kept_placement(job: Job, spec) -> Placement | None:
    """The job's stored placement, if the edited `spec` keeps its window, zone and scope."""
    if not job.flex_window or not spec.flex_window:
        return None
    try:
        same_window = schedules.parse_window(spec.flex_window).text == job.flex_window
    except schedules.InvalidSchedule:
        return None  # validation names the field
    if same_window and spec.timezone == job.timezone and check_scope(spec.flex_scope) == job.flex_scope:
        return Placement(cron=job.cron, note=job.flex_note)
    return None


# --- rebalance ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    job: Job
    before: str  # cron
    after: str
    note: str

    @property
    def moved(self) -> bool:
        return self.before != self.after


def jobs_rebalance(
    *, tenant: Tenant | None = None, queue: str | None = None, dry_run: bool = False, actor: str = ""
) -> list[Move]:
    """Place the enabled flexible jobs (of `tenant`, of `queue`, or all) again, as if added one by
    one in the order they were made, against their scopes' other jobs; save the moves unless
    `dry_run`. Returns every job looked at, moved or not.

    Use it when a window's load has changed since its jobs were placed (fixed-time jobs added
    or deleted). It holds the placement locks of the scopes it saves, so no job is placed
    meanwhile on a minute it reads as free. A job edited meanwhile keeps its edit: the save is
    conditional on its version.
    """
    jobs = Job.objects.filter(enabled=True, after_job__isnull=True).exclude(flex_window="").select_related("tenant")
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    with transaction.atomic():
        if not dry_run:  # no job placed meanwhile on a minute this rebalance reads as free
            scoped = list(jobs.values_list("tenant_id", "flex_scope", "queue"))
            lock_placements([row[0] for row in scoped], [row[2] for row in scoped if row[1] == "queue"])
        now = db_now()
        groups: dict[tuple, list[Job]] = {}
        for job in jobs.order_by("id"):
            key = ("queue", job.queue) if job.flex_scope == "queue" else ("tenant", job.tenant_id)
            groups.setdefault(key, []).append(job)
        moves = [move for members in groups.values() for move in _rebalance_scope(members, now)]
        if not dry_run:
            _save_moves([move for move in moves if move.moved], now, actor)
    return moves


def _rebalance_scope(members: list[Job], now: datetime) -> list[Move]:
    """Place `members` (one scope's flexible jobs) one by one over the scope's other jobs; each
    placed job counts as a neighbour for those after it.

    A queue scope's members may be several tenants' jobs: each is placed over them all, but its
    note tells its own tenant's counts only, as place() does (the note is the tenant's to read)."""
    # (tenant id, window, zone): planned fires per minute; tenant id None: the whole scope's.
    profiles: dict[tuple[int | None, str, str], list[float]] = {}
    ids = [job.id for job in members]
    moves = []
    for job in members:
        window = schedules.parse_window(job.flex_window)
        where = dict(window=window, zone_name=job.timezone, scope=job.flex_scope, queue=job.queue, now=now)
        whole = (None, window.text, job.timezone)
        if whole not in profiles:
            profiles[whole] = profile_for(job.tenant, **where, exclude_ids=ids)
        own = (job.tenant_id, window.text, job.timezone) if job.flex_scope == "queue" else None
        if own is not None and own not in profiles:
            profiles[own] = profile_for(job.tenant, **where, exclude_ids=ids, own_only=True)
        chosen = placed(
            window,
            job.timezone,
            profiles[whole],
            key=f"{job.tenant.slug}/{job.name}",
            label=scope_label(job.tenant, job.queue, job.flex_scope),
            now=now,
            shown=profiles[own] if own is not None else None,
        )
        moves.append(Move(job=job, before=job.cron, after=chosen.cron, note=chosen.note))
        added = schedules.Neighbours(crons=[(chosen.cron, job.timezone, 0, 1)])
        for (owner, text, zone_name), profile in profiles.items():
            if owner is None or owner == job.tenant_id:
                extra = schedules.load_profile(schedules.parse_window(text), zone_name, now, added)
                profiles[(owner, text, zone_name)] = [a + b for a, b in zip(profile, extra, strict=True)]
    return moves


def _save_moves(moves: list[Move], now: datetime, actor: str) -> None:
    with transaction.atomic():
        for move in moves:
            job = move.job
            schedule = replace(job.schedule, cron=move.after)
            next_run_at = schedules.next_fire_after(schedule, now - timedelta(microseconds=1))
            saved = Job.objects.filter(id=job.id, version=job.version, flex_window=job.flex_window).update(
                cron=move.after, flex_note=move.note, next_run_at=next_run_at, updated_at=now, version=F("version") + 1
            )
            if not saved:
                logger.info("job %s changed while it was rebalanced; its edit stands", job.id)
                continue
            audit_job(job, "job.rebalanced", actor, changes={"cron": [move.before, move.after]}, note=move.note)
        if moves:
            wake_beats()
