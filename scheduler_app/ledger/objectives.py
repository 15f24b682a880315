"""Fleet objectives counted from the ledger: each objective's events, once each, into its
running tallies (the counters on /metrics) and its events by hour (ObjectiveHour, the rollup
its window is read from).

An event is decided at one instant, and counted once that instant is COUNT_AFTER old:

- success: a run that ended succeeded, failed (not retryable) or dead, decided when it
  finished (finished_at; jobrun_finished_brin on PostgreSQL); good when it succeeded. A run
  that fails and is retried is decided by how its last attempt ends.
- start: a scheduled fire, decided threshold_seconds after its fire time (scheduled_at;
  jobrun_tenant_recent_idx, or jobrun_state_recent_idx for an objective of every tenant);
  good when its first attempt started by then. A fire the beat skipped as missed (coalesced,
  outside its catch-up window, the misfire policy, the run_all cap) is a bad event; one
  skipped for its overlap policy or a maintenance window, or cancelled, is no event. A fire
  recorded after the counting passed its decision is not counted (a beat back after every
  beat was down may count before its first turn records the missed fires): that outage is
  CronfleetNoLiveBeat's.

count_events() runs on a beat's background thread (alerts.roll_ups), every
CRONFLEET_ALERT_CHECK_SECONDS: each objective is locked while it is counted (others skip it),
its span since counted_until read in pieces that never cross an hour, so the tallies are exact
and never go down, whatever beats count. Nothing reads the ledger at scrape time: the metrics
and the pages read the tallies and the hours (window_of).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Count, F, Q, Sum

from scheduler_app.models import Job, JobRun, Objective, ObjectiveHour, ObjectiveKind, RunState, Trigger
from scheduler_app.schedules import SkipReason

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
COUNT_AFTER = timedelta(seconds=15)  # an event decided this long ago is final (its commit has landed)
CATCH_UP_HOURS = 24  # hours of one objective counted at most per call (after beats were down)
FINISHED = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD)
MISSED = tuple(reason.value for reason in SkipReason)  # a fire skipped for one of these was missed


def floor_hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def scoped_runs(objective: Objective):
    """The runs of the objective's jobs."""
    runs = JobRun.objects.all()
    if objective.tenant_id is not None:
        runs = runs.filter(tenant_id=objective.tenant_id)
    if not objective.tag:
        return runs
    if connection.features.supports_json_field_contains:
        # Joined, not a subquery of tagged jobs: no index serves the tags, so each run of the
        # span reads its job by primary key instead of the job table being read whole.
        return runs.filter(job__tags__contains=[objective.tag])
    return runs.filter(job_id__in=Job.objects.tagged(objective.tag).values("id"))


def events(objective: Objective, start: datetime, end: datetime) -> tuple[int, int]:
    """(good, total): the objective's events decided in (start, end]."""
    runs = scoped_runs(objective)
    if objective.kind == ObjectiveKind.SUCCESS:
        found = runs.filter(finished_at__gt=start, finished_at__lte=end, state__in=FINISHED).aggregate(
            total=Count("id"), good=Count("id", filter=Q(state=RunState.SUCCEEDED))
        )
        return found["good"], found["total"]
    threshold = timedelta(seconds=objective.threshold_seconds or 0)
    fires = runs.filter(trigger=Trigger.SCHEDULE, scheduled_at__gt=start - threshold, scheduled_at__lte=end - threshold)
    if objective.tenant_id is None:  # through jobrun_state_recent_idx, which leads with the state
        fires = fires.filter(state__in=RunState.values)
    fires = fires.exclude(state=RunState.CANCELLED).exclude(Q(state=RunState.SKIPPED) & ~Q(reason__in=MISSED))
    found = fires.aggregate(
        total=Count("id"),
        good=Count("id", filter=Q(attempt=1, started_at__lte=F("scheduled_at") + threshold)),
    )
    # A run on its second attempt or later: its first attempt's start is in its history.
    later = fires.filter(attempt__gt=1).values_list("scheduled_at", "attempts")
    good = found["good"] + sum(1 for at, attempts in later if started_within(at, attempts, threshold))
    return good, found["total"]


def started_within(scheduled_at: datetime, attempts: list, threshold: timedelta) -> bool:
    """Whether the first attempt in a run's history started by scheduled_at + threshold."""
    if not attempts or not attempts[0].get("started_at"):
        return False
    started = datetime.fromisoformat(attempts[0]["started_at"])
    if started.tzinfo is None:  # SQLite writes UTC without an offset
        started = started.replace(tzinfo=UTC)
    return started <= scheduled_at + threshold


def count_events(now: datetime) -> int:
    """Count every objective's events decided up to now - COUNT_AFTER; return how many were
    counted. Safe in several beats at once."""
    end = now - COUNT_AFTER
    counted = 0
    for objective_id in Objective.objects.filter(counted_until__lt=end).values_list("id", flat=True):
        counted += count_objective(objective_id, end)
    return counted


def count_objective(objective_id: int, end: datetime) -> int:
    """Count one objective's events up to `end` (at most CATCH_UP_HOURS of them), its row
    locked meanwhile; 0 when another beat holds it."""
    with transaction.atomic():
        locked = Objective.objects.filter(id=objective_id, counted_until__lt=end)
        if connection.features.has_select_for_update_skip_locked:
            locked = locked.select_for_update(skip_locked=True)
        objective = locked.first()
        if objective is None:
            return 0
        window = timedelta(days=objective.window_days)
        start = max(objective.counted_until, end - window)  # hours older than the window count for nothing
        end = min(end, floor_hour(start) + CATCH_UP_HOURS * HOUR)
        good_sum = total_sum = 0
        while start < end:
            stop = min(end, floor_hour(start) + HOUR)
            good, total = events(objective, start, stop)
            if total:
                add_to_hour(objective, floor_hour(start), good, total)
            good_sum, total_sum = good_sum + good, total_sum + total
            start = stop
        Objective.objects.filter(id=objective.id).update(
            counted_until=end, good_events=F("good_events") + good_sum, total_events=F("total_events") + total_sum
        )
        ObjectiveHour.objects.filter(objective=objective, hour__lt=floor_hour(end - window - DAY)).delete()
    return total_sum


def add_to_hour(objective: Objective, hour: datetime, good: int, total: int) -> None:
    hour_row, created = ObjectiveHour.objects.get_or_create(
        objective=objective, hour=hour, defaults={"good": good, "total": total}
    )
    if not created:
        ObjectiveHour.objects.filter(id=hour_row.id).update(good=F("good") + good, total=F("total") + total)


@dataclass(frozen=True)
class Window:
    """An objective over its window, as counted so far."""

    good: int
    total: int
    target: float

    @property
    def attainment(self) -> float | None:
        """The fraction of good events, None when there were none."""
        return self.good / self.total if self.total else None

    @property
    def budget_left(self) -> float:
        """The fraction of the error budget left: 1 with no bad event, 0 when the bad events
        are exactly what the target allows, below 0 once overspent."""
        allowed = (1 - self.target) * self.total
        bad = self.total - self.good
        if not bad:
            return 1.0
        return 1 - bad / allowed if allowed else float("-inf")


def window_of(objectives: Iterable[Objective], now: datetime) -> dict[int, Window]:
    """Each objective over its window ending `now`, from its hours (the window's first hour
    counted whole): one query per distinct window length."""
    objectives = list(objectives)
    found = {objective.id: Window(0, 0, objective.target) for objective in objectives}
    for days in {objective.window_days for objective in objectives}:
        ids = [objective.id for objective in objectives if objective.window_days == days]
        since = floor_hour(now - timedelta(days=days))
        sums = (
            ObjectiveHour.objects.filter(objective_id__in=ids, hour__gte=since)
            .values("objective_id")
            .annotate(good=Sum("good"), total=Sum("total"))
        )
        for row in sums:
            objective_id = row["objective_id"]
            found[objective_id] = Window(row["good"], row["total"], found[objective_id].target)
    return found
