#!/usr/bin/env python3
"""Measure what one tenant's alert flood costs another tenant's alerts: tenant "flood" has
jobs failing --flood-per-second times a second, each with an on-failure rule whose webhook
answers after --slow seconds (past the 5 s delivery timeout); tenant "quiet" has a job
failing every --quiet-every seconds (each of its jobs once), its webhook answering at once;
one real beat.

    .venv/bin/python bench/scripts/alert_flood.py                          # this checkout
    .venv/bin/python bench/scripts/alert_flood.py --root /tmp/old-alerts   # another tree (old code)
    .venv/bin/python bench/scripts/alert_flood.py --env CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS=0 \\
        --env CRONFLEET_ALERT_TENANT_ALERTS_PER_HOUR=100000                 # fair delivery alone

Makes a fresh database of its own on DATABASE_URL's server (dropped and created), migrates
it, starts `manage.py runbeat` from --root (CRONFLEET_ALERT_CHECK_SECONDS=1, plus each
--env), and records the failed runs itself (no worker: the runs are rows, as a worker would
leave them). The flood's rules are saved, then set to `cooldown_seconds: 0` in the table (as
a rule saved before a minimum existed). After --seconds it waits at most --drain seconds for
quiet's alerts and prints quiet's delivery delay (the run's end to the alert's arrival at
quiet's receiver) p50 / max, counting an alert still undelivered at the end by its age then,
and what became of flood's alerts. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import floodsetup  # beside this script (bench/scripts/)


class Receiver(http.server.ThreadingHTTPServer):
    """Notes when each alert arrives (by run id), answering after `delay` seconds."""

    daemon_threads = True

    def __init__(self, delay: float):
        self.delay, self.arrived = delay, {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.arrived.setdefault(body["run_id"], time.time())
                time.sleep(outer.delay)
                try:
                    self.send_response(204)
                    self.end_headers()
                except OSError:
                    pass  # the sender gave up waiting

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/alerts"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    floodsetup.add_arguments(parser, "cronfleet_alert_flood")
    parser.add_argument("--seconds", type=int, default=60, help="how long flood floods")
    parser.add_argument("--flood-per-second", type=float, default=5.0, help="flood's failed runs per second")
    parser.add_argument("--flood-jobs", type=int, default=50)
    parser.add_argument("--slow", type=float, default=6.0, help="seconds flood's webhook takes to answer")
    parser.add_argument("--quiet-every", type=float, default=2.0, help="seconds between quiet's failed runs")
    parser.add_argument("--drain", type=int, default=300, help="longest wait for quiet's alerts after the flood")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a setting for the beat")
    args = parser.parse_args()

    root = floodsetup.set_up(
        args,
        script="alert-flood",
        env={
            "CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8",  # the receivers are local
            "CRONFLEET_ALERT_CHECK_SECONDS": "1",
            **dict(item.split("=", 1) for item in args.env),
        },
    )
    beat = start_beat(root)
    try:
        flood(args)
    finally:
        floodsetup.stop(beat)


def start_beat(root: Path) -> subprocess.Popen:
    log = Path("/tmp") / f"alert_flood-beat-{os.getpid()}.log"
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runbeat", "--max-sleep", "1"],
        cwd=root,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    print(f"beat log: {log}", flush=True)
    time.sleep(5)  # the beat's start
    return proc


def flood(args) -> None:
    from scheduler_app import alerts, services
    from scheduler_app.models import Alert, AlertRule, Job, JobRun, RunState, db_now

    slow, fast = Receiver(args.slow), Receiver(0)
    far, anchor = db_now() + timedelta(days=3650), datetime(2024, 1, 1, tzinfo=UTC)  # the jobs never fire

    def jobs_of(slug: str, count: int, url: str) -> list[Job]:
        tenant = services.tenant_create(slug=slug, name=slug)
        made = [
            Job.objects.create(
                tenant=tenant,
                name=f"{slug}-{i}",
                every_seconds=60,
                anchor_at=anchor,
                next_run_at=far,
                task_name="scheduler_app.echo",
            )
            for i in range(count)
        ]
        for job in made:
            alerts.rule_set(job, {"on_failure": True, "webhook_url": url})
        return made

    flooders = jobs_of("flood", args.flood_jobs, slow.url)
    AlertRule.objects.filter(job__in=flooders).update(cooldown_seconds=0)
    # Each of quiet's jobs fails once: one alert per failure, whatever the cool-down.
    quiet = jobs_of("quiet", max(1, int(args.seconds / args.quiet_every)), fast.url)

    def fail(job: Job) -> JobRun:
        now = db_now()
        return JobRun.objects.create(
            job=job,
            tenant_id=job.tenant_id,
            scheduled_at=now - timedelta(seconds=1),
            state=RunState.FAILED,
            created_at=now,
            started_at=now - timedelta(seconds=0.5),
            finished_at=now,
            error="RuntimeError: down",
        )

    quiet_runs: list[JobRun] = []
    began, flooded = time.monotonic(), 0
    while (elapsed := time.monotonic() - began) < args.seconds:
        if flooded < elapsed * args.flood_per_second:
            fail(flooders[flooded % len(flooders)])
            flooded += 1
        elif len(quiet_runs) < min(len(quiet), elapsed / args.quiet_every):
            quiet_runs.append(fail(quiet[len(quiet_runs)]))
        else:
            time.sleep(0.01)
    deadline = time.monotonic() + args.drain
    while time.monotonic() < deadline and any(run.id not in fast.arrived for run in quiet_runs):
        time.sleep(0.5)
    ended = time.time()

    delays, waiting = [], []
    for run in quiet_runs:
        if run.id in fast.arrived:
            delays.append(fast.arrived[run.id] - run.finished_at.timestamp())
        else:
            waiting.append(ended - run.finished_at.timestamp())
    everything = sorted(delays + waiting)
    flood_alerts = Alert.objects.filter(tenant=flooders[0].tenant)
    print(f"code: {args.root}  settings: {' '.join(args.env) or '(defaults)'}")
    print(
        f"flood: {flooded} failed runs in {args.seconds} s, webhook answering after {args.slow:g} s; "
        f"{flood_alerts.count()} alerts recorded, {len(slow.arrived)} reached its receiver, "
        f"{sum(alerts.delivery_status(a) == 'suppressed' for a in flood_alerts)} suppressed over budget"
    )
    print(
        f"quiet: {len(quiet_runs)} failed runs, {len(delays)} alerts delivered, {len(waiting)} undelivered "
        f"after the {args.drain} s drain"
    )
    if everything:
        print(
            f"quiet delivery delay (run end to receiver; undelivered counted by their age): "
            f"p50 {statistics.median(everything):.2f} s, max {everything[-1]:.2f} s"
        )
    slow.shutdown()
    fast.shutdown()


if __name__ == "__main__":
    main()
