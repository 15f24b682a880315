"""bench timedata: how long the time-data check takes over N jobs (services/impact.py), the
bound a starting beat's check stays within (CRONFLEET_TIME_DATA_STARTUP_JOBS).

    manage.py bench timedata --jobs N

Two tenants of N cron jobs each, written in bulk with their next fire as the data installed
computes it, over six zones (two with DST, one with a half-hour offset): "jittered", every job
with a jitter seed of its own (no two compare alike, the dearest case), and "shared", 60
expressions over the six zones (jobs alike are compared once). Then impact_report over each
tenant, timed, and the check: no change found (the data did not move), every job checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

from bench import common
from scheduler_app import schedules
from scheduler_app.models import Job, Tenant, db_now
from scheduler_app.services import impact

ZONES = ("Europe/Berlin", "America/New_York", "Asia/Tbilisi", "Asia/Kolkata", "Australia/Sydney", "UTC")
BULK = 5000


@dataclass
class Options:
    jobs: int


def seed(label: str, count: int, now, *, jitter: bool) -> Tenant:
    tenant = Tenant.objects.create(slug=f"{common.PREFIX}timedata-{label}", name=f"Bench time data {label}")
    rows = []
    for n in range(count):
        variant = n if jitter else n % 60
        cron, zone = f"{variant % 60} {(variant // 60) % 24} * * *", ZONES[n % len(ZONES)]
        schedule = schedules.Schedule(cron=cron, timezone=zone, jitter=30 if jitter else 0, jitter_seed=n)
        rows.append(
            Job(
                tenant=tenant,
                name=f"daily-{n}",
                task_name="scheduler_app.echo",
                cron=cron,
                timezone=zone,
                jitter_seconds=schedule.jitter,
                jitter_seed=n,
                next_run_at=schedules.next_fire_after(schedule, now),
            )
        )
        if len(rows) == BULK:
            Job.objects.bulk_create(rows)
            rows = []
    Job.objects.bulk_create(rows)
    return tenant


def run(command, opts: Options) -> bool:
    now = db_now()
    out = command.stdout.write
    out(f"bench timedata: {opts.jobs:,} daily cron jobs a tenant over {len(ZONES)} zones; horizon 30 days")
    out(f"  {common.machine_line()}")
    ok = True
    for label, jitter in (("jittered", True), ("shared", False)):
        tenant = seed(label, opts.jobs, now, jitter=jitter)
        command.note(f"timedata: {label}: {opts.jobs} jobs seeded")
        started = time.perf_counter()
        report = impact.impact_report(tenant=tenant, horizon=timedelta(days=30))
        seconds = time.perf_counter() - started
        fine = report.checked == opts.jobs and not report.jobs
        ok &= fine
        out(
            f"  {label:9} {common.num(report.checked)} jobs checked in {seconds:.2f} s: "
            f"{common.num(report.checked / seconds)} jobs/s; {len(report.jobs)} changed "
            f"({'ok' if fine else 'FAILED: expected every job checked and none changed'})"
        )
    return ok
