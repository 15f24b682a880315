#!/usr/bin/env python3
"""Measure what one tenant's manual work costs another tenant's scheduled fires: tenant
"flood" backfills (1,000 runs each) and triggers on a shared queue while tenant "quiet" has
an every-second job there; one real beat, one real worker.

    .venv/bin/python bench/scripts/backfill_flood.py                         # this checkout
    .venv/bin/python bench/scripts/backfill_flood.py --root /tmp/old-fair    # another tree (old code)
    .venv/bin/python bench/scripts/backfill_flood.py --backfills 30 --seconds 60 --triggers-per-second 2

Makes a fresh database of its own on DATABASE_URL's server (dropped and created), migrates
it, starts `manage.py runbeat` and a Celery worker (four processes) from --root on a queue
of its own, then for --seconds: one backfill every seconds/backfills and
--triggers-per-second triggers, all of flood's jobs echo tasks. Then it waits (at most
--drain seconds) for quiet's fires of the window to start and prints quiet's start lag
(started_at - scheduled_at) p50 / p99 / max, how many of its fires were coalesced or skipped
(fires of the window without a run that started), and how much of flood's work went
through. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import floodsetup  # beside this script (bench/scripts/)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    floodsetup.add_arguments(parser, "cronfleet_backfill_flood")
    parser.add_argument("--seconds", type=int, default=60, help="how long flood floods (quiet's window)")
    parser.add_argument("--backfills", type=int, default=30, help="backfills of 1,000 runs during the window")
    parser.add_argument("--triggers-per-second", type=float, default=2.0)
    parser.add_argument("--drain", type=int, default=600, help="longest wait for quiet's fires to start")
    args = parser.parse_args()

    # 30,000 backfilled fires in a minute, far over the default bound on manual runs an hour
    # (CRONFLEET_MANUAL_RUNS_PER_HOUR): the flood is what this measures the budget against.
    root = floodsetup.set_up(args, script="backfill-flood", env={"CRONFLEET_MANUAL_RUNS_PER_HOUR": "0"})
    queue = f"flood-{uuid.uuid4().hex[:8]}"
    procs = start_processes(root, queue)
    try:
        flood(args, queue)
    finally:
        for proc in procs:
            floodsetup.stop(proc)
        drop_queue(queue)


def start_processes(root: Path, queue: str) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = Path("/tmp") / f"backfill_flood-{queue}"
    logs.mkdir(exist_ok=True)
    worker = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "project",
        "worker",
        "-Q",
        queue,
        "-c",
        "4",
        "-n",
        f"flood-{queue}@%h",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
        "-l",
        "warning",
    ]
    beat = [sys.executable, "manage.py", "runbeat", "--max-sleep", "1"]
    procs = floodsetup.start(root, env, logs, {"worker": worker, "beat": beat})
    print(f"logs in {logs}", flush=True)
    time.sleep(8)  # the worker's and the beat's start
    return procs


def flood(args, queue: str) -> None:
    from scheduler_app import services
    from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now

    flooder = Tenant.objects.create(slug="flood", name="flood")
    quiet = Tenant.objects.create(slug="quiet", name="quiet")
    far, anchor = db_now() + timedelta(days=3650), datetime(2024, 1, 1, tzinfo=UTC)  # flood's jobs never fire
    jobs = [
        Job.objects.create(
            tenant=flooder,
            name=f"flood-{i}",
            every_seconds=1,
            anchor_at=anchor,
            next_run_at=far,
            task_name="scheduler_app.echo",
            queue=queue,
        )
        for i in range(args.backfills)
    ]
    start = db_now().replace(microsecond=0) + timedelta(seconds=2)
    quiet_job = Job.objects.create(
        tenant=quiet,
        name="every-second",
        every_seconds=1,
        anchor_at=start,
        next_run_at=start,
        task_name="scheduler_app.echo",
        queue=queue,
    )
    time.sleep(2)
    began, backfilled, triggered = time.monotonic(), 0, 0
    while (elapsed := time.monotonic() - began) < args.seconds:
        if backfilled < args.backfills and elapsed >= backfilled * args.seconds / args.backfills:
            job = jobs[backfilled]
            end = db_now().replace(microsecond=0) - timedelta(days=1)
            services.job_backfill(job, start=end - timedelta(seconds=999), end=end, dry_run=False, actor="bench")
            backfilled += 1
        elif triggered < elapsed * args.triggers_per_second:
            services.job_trigger(jobs[triggered % len(jobs)], actor="bench")
            triggered += 1
        else:
            time.sleep(0.05)
    window_end = start + timedelta(seconds=args.seconds)
    expected = args.seconds + 1
    window = JobRun.objects.filter(job=quiet_job, scheduled_at__gte=start, scheduled_at__lte=window_end)
    deadline = time.monotonic() + args.drain
    while time.monotonic() < deadline:
        if (
            db_now() > window_end + timedelta(seconds=2)
            and not window.filter(state__in=[RunState.PENDING, RunState.QUEUED]).exists()
        ):
            break
        time.sleep(1)
    started = [run for run in window if run.started_at is not None]
    lags = sorted((run.started_at - run.scheduled_at).total_seconds() for run in started)
    flood_runs = JobRun.objects.filter(tenant=flooder)
    done = flood_runs.filter(state=RunState.SUCCEEDED).count()
    print(f"code: {Path(services.__file__).parents[2]}")
    print(
        f"flood: {backfilled} backfills, {triggered} triggers, {flood_runs.count():,} runs, "
        f"{done:,} succeeded by the end"
    )
    if lags:
        p99 = lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))]
        print(
            f"quiet: {len(started)} of {expected} fires started; start lag p50 {statistics.median(lags):.2f} s, "
            f"p99 {p99:.2f} s, max {lags[-1]:.2f} s; coalesced or skipped {expected - len(started)}"
        )
    else:
        print(f"quiet: none of {expected} fires started")


def drop_queue(queue: str) -> None:
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    keys = [key for key in client.scan_iter(f"{queue}*")]
    keys += [f"_kombu.binding.{queue}"]
    client.delete(*keys)
    client.close()


if __name__ == "__main__":
    main()
