"""Maintenance windows at the beat: the windows of a turn (one query), what they do to a
claimed job's planned fires (plan.plan_batch), and the running runs a `cancel` window stops.

A fire inside an open window that selects its job is recorded as skipped: `maintenance:
<name>` under `skip`; under `defer`, `maintenance: <name>: deferred to <end>`, and the job's
next fire becomes the window's end when its next scheduled fire is later, so the fires inside
coalesce into one run scheduled at the end (the fire key (job, scheduled_at) keeps it single
across beats); after it the schedule goes on as before. A deferred fire of a window that has
already ended (the beat was down) gets its run at the end in the same turn.

While a `cancel` window is open, each turn cancels the running runs of the jobs it selects,
through plan.cancel_runs and plan.revoke_running (the overlap policy's `replace` mechanism).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import lru_cache

from django.db import transaction
from django.db.models import Q

from scheduler_app import schedules
from scheduler_app.dispatch.plan import cancel_runs, revoke_running
from scheduler_app.models import Job, JobRun, MaintenanceWindow, RunState, WindowAction
from scheduler_app.schedules.windows import WindowTimes, open_at

# How far back a one-off window that has ended still counts: the fires a late beat plans
# reach back this far at most (the default catch-up window).
LOOKBACK = timedelta(days=1)
PREFIX = "maintenance: "
WINDOW_FIELDS = (
    "id",
    "updated_at",
    "tenant_id",
    "name",
    "zone",
    "starts_at",
    "ends_at",
    "cron",
    "duration_minutes",
    "action",
    "running_policy",
    "tags",
    "target_kinds",
)


@dataclass(frozen=True)
class BeatWindow:
    """A window as the beat reads it (built once per id and updated_at)."""

    id: int
    tenant_id: int | None
    name: str
    times: WindowTimes
    action: str
    running_policy: str
    tags: frozenset[str]
    kinds: frozenset[str]

    def selects(self, job: dict, tags: list[str] | None) -> bool:
        """Whether the window holds `job` (a claimed row; `tags` its tags when any window asks)."""
        if self.tenant_id is not None and self.tenant_id != job["tenant_id"]:
            return False
        if self.kinds and job["target_kind"] not in self.kinds:
            return False
        return not self.tags or not self.tags.isdisjoint(tags or ())

    def reason(self, end: datetime) -> str:
        if self.action == WindowAction.DEFER:
            return f"{PREFIX}{self.name}: deferred to {end.isoformat()}"
        return f"{PREFIX}{self.name}"


@lru_cache(maxsize=1024)
def beat_window_of(
    window_id: int,
    updated_at: datetime | None,
    tenant_id: int | None,
    name: str,
    zone: str,
    starts_at: datetime | None,
    ends_at: datetime | None,
    cron: str,
    duration_minutes: int | None,
    action: str,
    running_policy: str,
    tags: tuple[str, ...],
    kinds: tuple[str, ...],
) -> BeatWindow:
    times = WindowTimes(
        zone=zone, starts_at=starts_at, ends_at=ends_at, cron=cron, duration=timedelta(minutes=duration_minutes or 0)
    )
    return BeatWindow(window_id, tenant_id, name, times, action, running_policy, frozenset(tags), frozenset(kinds))


def turn_windows(now: datetime) -> list[BeatWindow]:
    """The enabled windows that may hold a fire of this turn: every recurring one, and the
    one-offs begun and not ended longer than LOOKBACK ago. One query."""
    rows = (
        MaintenanceWindow.objects.filter(enabled=True)
        .filter(~Q(cron="") | Q(starts_at__lte=now, ends_at__gt=now - LOOKBACK))
        .order_by("id")
        .values_list(*WINDOW_FIELDS)
    )
    return [beat_window_of(*row[:11], tuple(row[11] or ()), tuple(row[12] or ())) for row in rows]


class BatchWindows:
    """The windows that may hold a claimed batch's jobs, and the jobs' tags when a window
    selects by tag (one more query, only then)."""

    def __init__(self, windows: list[BeatWindow], jobs: list[dict]) -> None:
        self.windows = windows
        self.tags: dict[int, list[str]] = {}
        if any(window.tags for window in windows):
            self.tags = dict(Job.objects.filter(id__in=[job["id"] for job in jobs]).values_list("id", "tags"))

    def apply(self, job: dict, plan: schedules.Plan, now: datetime) -> schedules.Plan:
        """The job's plan with the fires inside its open windows taken out (see the module)."""
        mine = [window for window in self.windows if window.selects(job, self.tags.get(job["id"]))]
        if not mine or not plan.fires:
            return plan
        fires, skipped, next_run_at = [], list(plan.skipped), plan.next_run_at
        ends = set()
        for fire_at in plan.fires:
            found = holding(mine, fire_at)
            if found is None:
                fires.append(fire_at)
                continue
            window, end = found
            skipped.append((fire_at, window.reason(end)))
            if window.action == WindowAction.DEFER:
                ends.add(end)
        for end in sorted(ends):
            if end <= now:  # the window is over already: its coalesced run is due now
                fires.append(end)
            elif next_run_at is None or next_run_at > end:
                next_run_at = end
        return replace(plan, fires=sorted(set(fires)), skipped=skipped, next_run_at=next_run_at)


def holding(windows: list[BeatWindow], at: datetime) -> tuple[BeatWindow, datetime] | None:
    """The first of `windows` open at `at` (by id), with the end of its interval."""
    for window in windows:
        interval = open_at(window.times, at)
        if interval is not None:
            return window, interval[1]
    return None


def batch_windows(jobs: list[dict], now: datetime, windows: list[BeatWindow] | None = None) -> BatchWindows | None:
    """The windows for a claimed batch (the turn's, or read here), None when none concerns it."""
    windows = turn_windows(now) if windows is None else windows
    if not windows:
        return None
    tenants = {job["tenant_id"] for job in jobs}
    concerned = [window for window in windows if window.tenant_id is None or window.tenant_id in tenants]
    return BatchWindows(concerned, jobs) if concerned else None


def cancel_in_windows(windows: list[BeatWindow], now: datetime) -> int:
    """Cancel the running runs of the jobs each open `cancel` window selects; return how many.
    Nothing is read when no such window is open."""
    cancel: dict[int, str] = {}
    for window in windows:
        if window.running_policy != "cancel" or (interval := open_at(window.times, now)) is None:
            continue
        jobs = Job.objects.all()
        if window.tenant_id is not None:
            jobs = jobs.filter(tenant_id=window.tenant_id)
        if window.kinds:
            jobs = jobs.filter(target_kind__in=window.kinds)
        if window.tags:
            tagged = Q()
            for tag in sorted(window.tags):
                tagged |= Q(id__in=Job.objects.tagged(tag).values("id"))
            jobs = jobs.filter(tagged)
        reason = f"{PREFIX}{window.name}: cancelled, the window is open until {interval[1].isoformat()}"
        for run_id in JobRun.objects.filter(state=RunState.RUNNING, job__in=jobs.values("id")).values_list(
            "id", flat=True
        ):
            cancel.setdefault(run_id, reason)
    if not cancel:
        return 0
    with transaction.atomic():
        cancelled = cancel_runs(cancel, now)
    revoke_running(cancelled)
    return len(cancelled)
