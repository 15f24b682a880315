"""manage.py status: the cluster at a glance, from the database and the broker.

Beats and workers (live, stale; a worker's HTTP attempts in flight, waiting and hosts
saturated, as its heartbeat summed them over its pool processes), the due backlog and its
oldest fire, broker queue depths with the live workers consuming each (and the queues with
runs waiting that none consumes), dispatch and start lag over the last 5 minutes, runs
scheduled in the last hour by state, and the jobs failing in that hour. Every figure comes
from cluster.snapshot() and stats.py, which read indexes sized to the work due, in flight or
in the window, never the whole job table or ledger.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

import scheduler_app
from scheduler_app import hints
from scheduler_app.conf import app_settings
from scheduler_app.ledger import stats
from scheduler_app.management.tables import NO_TABLES, OneLineErrors, format_table, missing_tables, shorten, utc_text
from scheduler_app.models import NodeKind
from scheduler_app.observability import cluster
from scheduler_app.observability.nodes import flight_of

LAG_WINDOW = timedelta(minutes=5)
RUNS_WINDOW = timedelta(hours=1)
CLEAR = "\033[H\033[2J"


def gather() -> dict:
    """Everything the command shows, as JSON-ready values."""
    found = cluster.snapshot()
    lags = stats.run_stats(None, window=LAG_WINDOW, now=found.now)
    runs = stats.run_stats(None, window=RUNS_WINDOW, now=found.now)
    return {
        "version": scheduler_app.__version__,  # this process's Cronfleet; each node's own is in "nodes"
        "at": found.now.isoformat(),
        "nodes": [
            {
                "kind": n.node.kind,
                "name": n.node.name,
                "state": n.state,
                "last_seen_seconds": round(n.age, 1),
                "activity": n.node.activity,
                "queues": n.node.queues,
                "host": n.node.host,
                "pid": n.node.pid,
                "version": n.node.version,
                "http": flight_of(n.node.activity) if n.node.kind == NodeKind.WORKER else None,
            }
            for n in found.nodes
            if n.state != "stopped"
        ],
        "stopped_nodes": sum(1 for n in found.nodes if n.state == "stopped"),
        "live": {kind: len(found.live(kind)) for kind in NodeKind.values},
        "due_jobs": found.due_jobs,
        "due_jobs_capped": found.due_capped,
        "oldest_due_seconds": round(found.oldest_due_seconds, 1),
        "in_flight": found.in_flight,
        "waiting": found.waiting,
        "queues": {
            queue: {
                "depth": None if found.queue_depths is None else found.queue_depths.get(queue),
                "live_workers": workers,
            }
            for queue, workers in found.queue_workers.items()
        },
        "unconsumed_queues": found.unconsumed,
        "unconsumed_expire_seconds": app_settings.UNCONSUMED_EXPIRE_SECONDS,
        "broker_error": found.broker_error,
        "lags_window_seconds": int(LAG_WINDOW.total_seconds()),
        "dispatch_lag_seconds": lags["dispatch_lag_seconds"],
        "start_lag_seconds": lags["start_lag_seconds"],
        "runs_window_seconds": int(RUNS_WINDOW.total_seconds()),
        "runs": {state: count for state, count in runs["counts"].items() if count},
        "failure_rate": runs["failure_rate"],
        "failing_jobs": [
            {**job, "last_at": utc_text(job["last_at"]) if job["last_at"] else None}
            for job in stats.failing_jobs(None, window=RUNS_WINDOW, now=found.now)
        ],
    }


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min" if value < 7200 else f"{value / 3600:.1f} h"


def http_cells(http: dict | None) -> tuple:
    """A worker's HTTP attempts in flight, waiting for a slot, and hosts saturated (its
    heartbeat's sum over its pool processes); '-' when it reported none."""
    if not http:
        return ("-", "-", "-")
    return (f"{http['in_flight']:,}", f"{http['waiting']:,}", f"{http['hosts_saturated']:,}")


def render(status: dict) -> str:
    lines = [f"Cronfleet {status['version']} at {status['at']} (the database's clock)", ""]
    live = status["live"]
    lines.append(
        f"Beats: {live['beat']} live   Workers: {live['worker']} live"
        + (f"   ({status['stopped_nodes']} stopped recently)" if status["stopped_nodes"] else "")
    )
    if status["nodes"]:
        lines.append(
            format_table(
                [
                    "kind",
                    "name",
                    "state",
                    "last seen",
                    "activity",
                    "http in flight",
                    "waiting",
                    "hosts saturated",
                    "queues",
                ],
                [
                    (
                        n["kind"],
                        n["name"],
                        n["state"].upper() if n["state"] == "stale" else n["state"],
                        seconds(n["last_seen_seconds"]) + " ago",
                        shorten(n["activity"].split("; http ")[0], 50),
                        *http_cells(n["http"]),
                        ", ".join(n["queues"]),
                    )
                    for n in status["nodes"]
                ],
            )
        )
    if not live["beat"]:
        lines.append("NO LIVE BEAT: nothing is being dispatched")
    lines += [
        "",
        f"Due: {status['due_jobs']:,}{'+' if status['due_jobs_capped'] else ''} jobs, oldest due "
        f"{seconds(status['oldest_due_seconds'])} ago"
        if status["due_jobs"]
        else "Due: nothing",
        "In flight: "
        + ", ".join(f"{count:,} {state}" for state, count in status["in_flight"].items())
        + "   Waiting: "
        + ", ".join(f"{count:,} for {why}" for why, count in status["waiting"].items()),
        "",
    ]
    if status["broker_error"]:
        lines.append(f"Broker: {status['broker_error']}")
    lines.append(
        format_table(
            ["queue", "depth", "live workers"],
            [
                (queue, "?" if q["depth"] is None else f"{q['depth']:,}", q["live_workers"])
                for queue, q in status["queues"].items()
            ],
        )
    )
    if status["unconsumed_queues"]:
        expire = status["unconsumed_expire_seconds"]
        lines.append(
            f"NO LIVE WORKER for queue{'s' if len(status['unconsumed_queues']) > 1 else ''} "
            f"{', '.join(status['unconsumed_queues'])}: runs wait there, are not published again"
            + (f", and are skipped (no_consumer) after {seconds(expire)}" if expire else "")
            + f"; {hints.worker_hint(status['unconsumed_queues'])}"
        )
    lines += [
        "",
        f"Lags over the last {status['lags_window_seconds'] // 60} minutes (scheduled runs):",
        format_table(
            ["lag", "runs", "p50", "p99"],
            [
                (name, f"{lag['count']:,}", seconds(lag["p50"]), seconds(lag["p99"]))
                for name, lag in (("dispatch", status["dispatch_lag_seconds"]), ("start", status["start_lag_seconds"]))
            ],
        ),
    ]
    runs = status["runs"]
    rate = status["failure_rate"]
    lines += [
        "",
        "Runs scheduled in the last hour: "
        + (", ".join(f"{count:,} {state}" for state, count in runs.items()) or "none")
        + (f"; failure rate {rate:.1%}" if rate is not None else ""),
    ]
    if status["failing_jobs"]:
        lines += [
            "Failing jobs in the last hour:",
            format_table(
                ["job", "failed", "dead", "last", "last error"],
                [
                    (job["job"], job["failed"], job["dead"], job["last_at"], shorten(job["last_error"], 60))
                    for job in status["failing_jobs"]
                ],
            ),
        ]
    return "\n".join(lines)


class Command(OneLineErrors, BaseCommand):
    help = "Show beats and workers, the due backlog, queue depths, lags, recent runs and failing jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="One JSON object (one per line with --watch)"
        )
        parser.add_argument(
            "--watch", type=float, default=None, metavar="S", help="Show it again every S seconds until interrupted"
        )

    def handle(self, *args, as_json: bool = False, watch: float | None = None, **options) -> None:
        if watch is not None and watch <= 0:
            raise CommandError("--watch must be a positive number of seconds")
        try:
            while True:
                self.show(as_json, clear=watch is not None and not as_json and sys.stdout.isatty())
                if watch is None:
                    return
                time.sleep(watch)
        except KeyboardInterrupt:
            return

    def show(self, as_json: bool, *, clear: bool) -> None:
        try:
            status = gather()
        except DatabaseError as exc:
            if missing_tables(exc):
                raise CommandError(NO_TABLES, returncode=1) from None
            raise CommandError(f"the database did not answer: {exc}") from None
        if as_json:
            self.stdout.write(json.dumps(status, default=str, ensure_ascii=False))
        else:
            self.stdout.write((CLEAR if clear else "") + render(status) + "\n")
