"""Time-data impact over the fleet (docs/time-data.md): each enabled job's held fires (its
next_run_at, its runs recorded but not started) checked against the zone and holiday data
this process has installed (schedules.compare), reported per tenant; the fix, next_run_at
re-planned by compare-and-set and audited; the alerts, one per change (alerts/timedata.py).

Reads the jobs in chunks, soonest due first, one query for a chunk's calendars and one for
its recorded runs; jobs with the same schedule and held fires are compared once.
"""

from __future__ import annotations

import importlib
import logging
import os
import zoneinfo
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import holidays
from django.db import transaction

from scheduler_app import schedules
from scheduler_app.alerts.timedata import TimeDataAlert, raise_time_data_alerts
from scheduler_app.conf import app_settings
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import Job, JobRun, RunState, Tenant, Trigger, business_calendars, db_now, schedule_of
from scheduler_app.models.lifecycle import audit_job
from scheduler_app.observability import metrics
from scheduler_app.validation import InvalidInput

logger = logging.getLogger(__name__)

CHUNK = 2000
MAX_HORIZON_DAYS = 366
HELD_STATES = (RunState.PENDING, RunState.QUEUED)
JOB_COLUMNS = (
    "id",
    "tenant_id",
    "tenant__slug",
    "name",
    "cron",
    "timezone",
    "every_seconds",
    "run_at",
    "anchor_at",
    "start_at",
    "end_at",
    "jitter_seconds",
    "jitter_seed",
    "calendar_id",
    "calendar_policy",
    "next_run_at",
)


@dataclass
class JobImpact:
    job_id: int
    tenant_id: int
    tenant: str
    name: str
    next_run_at: datetime | None
    changes: list[schedules.Change]
    replan: datetime | None = None  # next_run_at as the data says now; None: leave it
    replanned: bool = False

    @property
    def label(self) -> str:
        return f"{self.tenant}/{self.name}"


@dataclass
class Report:
    now: datetime
    horizon: timedelta
    checked: int = 0
    limit: int | None = None  # the start-up check's cap, when it stopped there
    jobs: list[JobImpact] = field(default_factory=list)

    @property
    def capped(self) -> bool:
        return self.limit is not None and self.checked >= self.limit

    def by_tenant(self) -> dict[str, list[JobImpact]]:
        found: dict[str, list[JobImpact]] = {}
        for item in sorted(self.jobs, key=lambda item: (item.tenant, item.name)):
            found.setdefault(item.tenant, []).append(item)
        return found

    def counts(self) -> Counter:
        return Counter(change.kind.value for item in self.jobs for change in item.changes)

    def sources(self, jobs: list[JobImpact] | None = None) -> list[str]:
        """The zones and calendars that caused the changes, as 'zone X' / 'calendar Y'."""
        return sorted(
            {
                f"{change.cause} {change.source}"
                for item in (self.jobs if jobs is None else jobs)
                for change in item.changes
            }
        )


def check_horizon(value) -> timedelta:
    """A horizon as days: 30, '30', '30d', or '12h'; InvalidInput("horizon") otherwise."""
    text = str(value).strip().lower()
    unit = 3600 if text.endswith("h") else 86400
    number = text.rstrip("dh")
    if not number.isdigit() or not 0 < int(number) * unit <= MAX_HORIZON_DAYS * 86400:
        raise InvalidInput(
            "horizon", f"must be a whole number of days (30d) or hours (12h), at most {MAX_HORIZON_DAYS}d"
        )
    return timedelta(seconds=int(number) * unit)


def default_horizon() -> timedelta:
    return timedelta(days=app_settings.TIME_DATA_HORIZON_DAYS)


def impact_report(
    *,
    now: datetime | None = None,
    horizon: timedelta | None = None,
    tenant: Tenant | None = None,
    job_ids=None,
    limit: int | None = None,
) -> Report:
    """The changes of every enabled job with a next fire (of `tenant`, of `job_ids`), soonest
    due first; with `limit`, of that many jobs at most."""
    report = Report(now=now or db_now(), horizon=horizon or default_horizon(), limit=limit)
    jobs = Job.objects.filter(enabled=True, next_run_at__isnull=False)
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    if job_ids is not None:
        jobs = jobs.filter(id__in=list(job_ids))
    rows = jobs.order_by("next_run_at", "id").values(*JOB_COLUMNS)
    if limit is not None:
        rows = rows[:limit]
    memo: dict = {}
    chunk: list[dict] = []
    for row in rows.iterator(chunk_size=CHUNK):
        chunk.append(row)
        if len(chunk) == CHUNK:
            _compare_chunk(chunk, report, memo)
            chunk = []
    if chunk:
        _compare_chunk(chunk, report, memo)
    return report


def _compare_chunk(rows: list[dict], report: Report, memo: dict) -> None:
    calendars = business_calendars((row["calendar_id"] for row in rows), report.now.year)
    recorded = _recorded_fires(rows)
    for row in rows:
        report.checked += 1
        calendar = calendars.get(row["calendar_id"])
        schedule = schedule_of(
            row["cron"],
            row["timezone"],
            row["every_seconds"],
            row["run_at"],
            row["anchor_at"],
            row["start_at"],
            row["end_at"],
            row["jitter_seconds"],
            row["jitter_seed"] if row["jitter_seconds"] else 0,  # a seed without jitter moves nothing
            calendar,
            row["calendar_policy"],
        )
        held = tuple(recorded.get(row["id"], ()))
        key = (schedule, row["next_run_at"], held)
        if key not in memo:
            memo[key] = _compare(schedule, row["next_run_at"], held, report)
        changes, replan = memo[key]
        if changes:
            report.jobs.append(
                JobImpact(
                    row["id"], row["tenant_id"], row["tenant__slug"], row["name"], row["next_run_at"], changes, replan
                )
            )


def _compare(schedule, next_run_at, held, report: Report) -> tuple[list[schedules.Change], datetime | None]:
    try:
        changes = schedules.compare(
            schedule, next_run_at=next_run_at, recorded=held, now=report.now, horizon=report.horizon
        )
    except schedules.InvalidSchedule as exc:  # a zone the data installed no longer has
        logger.warning("time data: cannot compute %s: %s", schedule.describe(), exc)
        return [], None
    if not any(change.held == "next_run_at" or change.kind == schedules.ChangeKind.APPEARED for change in changes):
        return changes, None
    if next_run_at is None or next_run_at <= report.now:
        return changes, None  # due already: the beat plans it under its misfire policy
    replan = schedules.next_fire_after(schedule, report.now - timedelta(microseconds=1))
    for change in changes:
        # The held fire moved into the past: it is still due, so the beat runs it at once
        # (under the misfire policy; a fire that has a run already gets no second one).
        if change.held == "next_run_at" and change.new is not None and (replan is None or change.new < replan):
            replan = change.new
    return changes, (replan if replan != next_run_at else None)


def _recorded_fires(rows: list[dict]) -> dict[int, list[datetime]]:
    found: dict[int, list[datetime]] = {}
    runs = JobRun.objects.filter(
        tenant_id__in={row["tenant_id"] for row in rows},
        state__in=HELD_STATES,
        trigger=Trigger.SCHEDULE,
        job_id__in=[row["id"] for row in rows],
    ).values_list("job_id", "scheduled_at")
    for job_id, scheduled_at in runs:
        found.setdefault(job_id, []).append(scheduled_at)
    return found


def impact_apply(report: Report, *, actor: str = "") -> int:
    """Set next_run_at of each job whose held next fire changed to the fire the data says now,
    if it still holds the instant the report read (else it was edited or fired meanwhile:
    left alone). Audited as job.time_data_replanned; returns how many jobs changed."""
    done = 0
    for item in report.jobs:
        if item.replan is None:
            continue
        with transaction.atomic():
            updated = Job.objects.filter(id=item.job_id, enabled=True, next_run_at=item.next_run_at).update(
                next_run_at=item.replan
            )
            if updated:
                job = Job(id=item.job_id, tenant_id=item.tenant_id, name=item.name)
                audit_job(
                    job,
                    "job.time_data_replanned",
                    actor,
                    next_run_at=[item.next_run_at.isoformat() if item.next_run_at else None, item.replan.isoformat()],
                    causes=sorted({f"{change.cause} {change.source}" for change in item.changes}),
                )
        item.replanned = bool(updated)
        done += updated
    if done:
        wake_beats()
    return done


def startup_check() -> Report | None:
    """A starting beat's check: the CRONFLEET_TIME_DATA_STARTUP_JOBS jobs due soonest (0: no
    check), an alert per change, the metric, a log line per tenant with changes. Bounded by
    that cap, since a beat must start whatever the fleet's size: past it, `schedules impact`
    checks the rest (the log says so)."""
    limit = app_settings.TIME_DATA_STARTUP_JOBS
    if not limit:
        return None
    report = impact_report(limit=limit)
    raised = raise_alerts(report)
    metrics.observe_time_data(report.counts())
    for tenant, items in report.by_tenant().items():
        logger.warning(
            "time data: tenant %s: %s; see `manage.py schedules impact --tenant %s`",
            tenant,
            tenant_summary(items),
            tenant,
        )
    capped = (
        f", the {limit} due soonest (CRONFLEET_TIME_DATA_STARTUP_JOBS); `schedules impact` checks them all"
        if report.capped
        else ""
    )
    logger.info(
        "time data: checked %s jobs%s: %s changed, %s alerts raised",
        report.checked,
        capped,
        len(report.jobs),
        raised,
    )
    return report


def change_text(change: schedules.Change) -> str:
    """One change in words, e.g. 'moved 2026-12-07 05:00Z -> 06:00Z (zone Asia/Tbilisi: ...)'."""
    where = f"{change.cause} {change.source}: {change.detail}"
    held = " (a recorded run)" if change.held == "ledger" else ""
    if change.kind == schedules.ChangeKind.MOVED:
        return f"moved{held} {_utc(change.old)} -> {_utc(change.new)} ({where})"
    if change.kind == schedules.ChangeKind.VANISHED:
        return f"vanished{held} {_utc(change.old)} ({where})"
    more = f" and {change.more} more" if change.more else ""
    return f"appeared {_utc(change.new)}{more} ({where})"


def tenant_summary(items: list[JobImpact]) -> str:
    """'2 moved, 1 appeared in 3 jobs (zone Asia/Tbilisi, calendar uk-bank)'."""
    counts = Counter(change.kind.value for item in items for change in item.changes)
    kinds = ", ".join(f"{counts[kind]} {kind}" for kind in ("moved", "appeared", "vanished") if counts[kind])
    sources = sorted({f"{change.cause} {change.source}" for item in items for change in item.changes})
    return f"{kinds} in {len(items)} job{'s' if len(items) != 1 else ''} ({', '.join(sources)})"


def _utc(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%SZ")


def raise_alerts(report: Report) -> int:
    """One alert per change found (recorded once, whichever beat or check finds it first)."""
    found = [
        TimeDataAlert(
            job_id=item.job_id,
            tenant_id=item.tenant_id,
            fingerprint=change.fingerprint(item.job_id),
            message=f"time data: {change_text(change)} — job {item.label}",
            detail=change_json(change),
        )
        for item in report.jobs
        for change in item.changes
    ]
    return raise_time_data_alerts(found, report.now) if found else 0


def change_json(change: schedules.Change) -> dict:
    return {
        "kind": change.kind.value,
        "held": change.held,
        "old": change.old.isoformat() if change.old else None,
        "new": change.new.isoformat() if change.new else None,
        "cause": change.cause.value,
        "source": change.source,
        "detail": change.detail,
        "more": change.more,
    }


def report_json(report: Report) -> dict:
    return {
        "now": report.now.isoformat(),
        "horizon_seconds": int(report.horizon.total_seconds()),
        "checked": report.checked,
        "capped": report.capped,
        "data": data_sources(),
        "counts": dict(report.counts()),
        "tenants": {
            tenant: [
                {
                    "job": item.name,
                    "job_id": item.job_id,
                    "next_run_at": item.next_run_at.isoformat() if item.next_run_at else None,
                    "replan": item.replan.isoformat() if item.replan else None,
                    "changes": [change_json(change) for change in item.changes],
                }
                for item in items
            ]
            for tenant, items in report.by_tenant().items()
        },
    }


def data_sources() -> dict:
    """Where this process reads its time data: zoneinfo's search path (the first directory
    holding a zone wins; the tzdata package only after all of them) and the versions found."""
    paths = []
    for path in zoneinfo.TZPATH:
        version = _tzdata_version(Path(path))
        if version is not None:
            paths.append(f"{path} ({version})")
    try:  # optional: only where the tzdata package is installed
        package = getattr(importlib.import_module("tzdata"), "IANA_VERSION", "?")
    except ImportError:
        package = None
    return {
        "zoneinfo_path": paths,
        "tzdata_package": package,
        "pythontzpath": os.environ.get("PYTHONTZPATH", ""),
        "holidays": getattr(holidays, "__version__", "?"),
    }


def _tzdata_version(path: Path) -> str | None:
    if not path.is_dir():
        return None
    for name in ("tzdata.zi", "+VERSION"):
        try:
            first = (path / name).read_text(errors="replace").splitlines()[0]
        except (OSError, IndexError):
            continue
        return first.removeprefix("# version").strip() or "?"
    return "version unknown"
