"""bench flexible: N nightly jobs added one by one, and how flat their fires land in the window.

    manage.py bench flexible --jobs N [--window "daily 01:00-03:00"]

Three tenants of N jobs each, every job added through services.job_create (the path the API
and `jobs add` take), one at a time:

- flexible: a flexible window (`--window`), placed at the least loaded minute of the tenant;
- jitter: today's way to spread them, cron at the window's start with jitter_seconds the
  window's length (a stable random offset per job);
- fixed: cron at the window's start, no jitter (the floor a spread is measured against).

Then, for the next occurrence of the window (tomorrow, UTC), each job's fire is computed from
its saved schedule and counted per minute: the peak and the mean fires per minute over the
window's minutes, the minutes used, and the time each add took (mean, p95, and the mean of the
last tenth, which shows whether placing gets slower as the tenant fills). The checks: the
flexible peak is at most ceil(N / minutes), and no higher than the jitter's.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench import common
from scheduler_app import schedules, services
from scheduler_app.models import Job, Tenant, db_now

TASK = "scheduler_app.echo"
DEFAULT_WINDOW = "daily 01:00-03:00"


@dataclass
class Options:
    jobs: int
    window: str = DEFAULT_WINDOW


@dataclass
class Result:
    label: str
    per_minute: Counter
    add_seconds: list[float]


def window_start(window: schedules.Window, now: datetime) -> datetime:
    """The window's next occurrence after today, in UTC (the bench's tenants are in UTC)."""
    return window.occurrences("UTC", now)[0][0]


def add_jobs(label: str, count: int, spec_of, note) -> list[float]:
    tenant = Tenant.objects.create(slug=f"{common.PREFIX}flex-{label}", name=f"Bench flexible {label}", timezone="UTC")
    seconds = []
    for n in range(count):
        started = time.perf_counter()
        services.job_create(tenant, spec_of(f"nightly-{n}"), actor="bench")
        seconds.append(time.perf_counter() - started)
        if (n + 1) % max(1, count // 4) == 0:
            note(f"flexible: {label}: {n + 1}/{count} jobs added")
    return seconds


def fires_per_minute(label: str, window: schedules.Window, begin: datetime) -> Counter:
    """Each job's first fire in the window's occurrence at `begin`, counted per minute of the window."""
    end = begin + timedelta(minutes=window.length)
    counts: Counter = Counter()
    for job in Job.objects.filter(tenant__slug=f"{common.PREFIX}flex-{label}").only(
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
    ):
        fire = schedules.next_fire_after(job.schedule, begin - timedelta(microseconds=1))
        if fire is not None and fire < end:
            counts[int((fire - begin).total_seconds() // 60)] += 1
    return counts


def run(command, opts: Options) -> bool:
    window = schedules.parse_window(opts.window)
    if window.kind != "daily":
        raise ValueError("bench flexible: --window must be a daily window ('daily HH:MM-HH:MM')")
    start_cron = window.cron_at(0)
    scenarios = {
        "flexible": lambda name: services.JobSpec(name=name, task_name=TASK, flex_window=window.text),
        "jitter": lambda name: services.JobSpec(
            name=name, task_name=TASK, cron=start_cron, jitter_seconds=window.length * 60
        ),
        "fixed": lambda name: services.JobSpec(name=name, task_name=TASK, cron=start_cron),
    }
    begin = window_start(window, db_now())
    results = []
    for label, spec_of in scenarios.items():
        seconds = add_jobs(label, opts.jobs, spec_of, command.note)
        results.append(Result(label, fires_per_minute(label, window, begin), seconds))
    return report(command.stdout.write, opts, window, begin, results)


def report(out, opts: Options, window: schedules.Window, begin: datetime, results: list[Result]) -> bool:
    ideal = math.ceil(opts.jobs / window.length)
    out(
        f"bench flexible: {opts.jobs:,} jobs a tenant, each added through services.job_create; window "
        f"{window.text} UTC, its occurrence from {begin.astimezone(UTC):%Y-%m-%d %H:%M}Z ({window.length} minutes; "
        f"flat would be {ideal} a minute)"
    )
    out(f"  {common.machine_line()}")
    rows = []
    for result in results:
        fires = sum(result.per_minute.values())
        tail = result.add_seconds[-max(1, len(result.add_seconds) // 10) :]
        rows.append(
            (
                result.label,
                common.num(fires),
                common.num(max(result.per_minute.values(), default=0)),
                common.num(fires / window.length, 1),
                common.num(len(result.per_minute)),
                common.num(statistics.fmean(result.add_seconds) * 1000, 1),
                common.num(quantile(result.add_seconds, 0.95) * 1000, 1),
                common.num(statistics.fmean(tail) * 1000, 1),
            )
        )
    common.table(
        out,
        [
            "schedule",
            "fires in window",
            "peak/min",
            "mean/min",
            "minutes used",
            "ms/add",
            "p95 ms/add",
            "last 10% ms/add",
        ],
        rows,
    )
    peaks = {result.label: max(result.per_minute.values(), default=0) for result in results}
    fires = {result.label: sum(result.per_minute.values()) for result in results}
    return common.print_checks(
        out,
        [
            (
                "every job fires once in the window",
                f"{min(fires.values()):,} of {opts.jobs:,}",
                all(count == opts.jobs for count in fires.values()),
            ),
            ("flexible peak <= ceil(N / minutes)", f"{peaks['flexible']} <= {ideal}", peaks["flexible"] <= ideal),
            (
                "flexible peak <= jitter peak",
                f"{peaks['flexible']} <= {peaks['jitter']}",
                peaks["flexible"] <= peaks["jitter"],
            ),
        ],
    )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
