#!/usr/bin/env python3
"""Measure what observing Cronfleet costs at scale: a database of 1,000,000 jobs and
10,000,000 runs, and the time of a /metrics scrape, `manage.py status` and the stats API.

    .venv/bin/python bench/scripts/scale_observe.py                      # seed once, then measure
    .venv/bin/python bench/scripts/scale_observe.py --jobs 100000 --runs 1000000 --database cronfleet_obs_small

Makes (or reuses) a database of its own on DATABASE_URL's server, migrates it and, when it
holds fewer jobs than asked, seeds it with INSERT ... SELECT generate_series (no ORM loop):
1,000 tenants; jobs spread over the next 990 hours, 1 in 100 due (over the last 10 hours),
1 in 97 paused, on five queues; runs one every 0.06 s back from a minute ago (10,000,000 span a week), mostly
succeeded, 1 % failed, 1 % dead, and a few thousand queued, running, held (quota, overlap)
and retrying; then VACUUM ANALYZE, as autovacuum would have by then.

Then it times, on a warm cache, each several times (median and worst): the cluster snapshot
(cluster.snapshot: the scrape's queries, then with the broker's queue depths), the whole /metrics
answer, `manage.py status --json` and GET /api/v1/stats/?all_tenants=true (a staff key), and
prints the plans of the scrape's two statements. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this is bench/scripts/)

SEED_TENANTS = """
INSERT INTO scheduler_app_tenant (id, slug, name, timezone, is_active, created_at, webhook_secret_encrypted,
                                  webhook_secret_previous_encrypted, min_interval_seconds, weight)
SELECT i, 'tenant-' || i, 'Tenant ' || i, 'UTC', true, now(), '', '', 0, 1
  FROM generate_series(1, %(tenants)s) AS i
"""
SEED_JOBS = """
INSERT INTO scheduler_app_job (id, tenant_id, name, description, tags, cron, timezone, enabled, paused_note,
                               next_run_at, target_kind, task_name, args, kwargs, target_config, queue,
                               timeout_seconds, max_attempts, retry_backoff_seconds, retry_backoff_max_seconds,
                               misfire_policy, catchup_window_seconds, run_all_cap, overlap_policy, version,
                               created_at, updated_at, jitter_seconds, jitter_seed, priority)
SELECT i, (i - 1) %% %(tenants)s + 1, 'job-' || i, '', '[]', '* * * * *', 'UTC', i %% 97 <> 0, '',
       date_trunc('minute', now()) + make_interval(mins => (i %% 1000 - 10) * 60 + i %% 60), 'task',
       'scheduler_app.echo', '[]', '{}',
       '{}', 'q' || i %% 5, 300, 3, 10, 3600, 'run_once', 86400, 100, 'allow', 1, now(), now(), 0, 0, 5
  FROM generate_series(%(first)s, %(last)s) AS i
"""
# Run i: fire time 0.06 s x i before a minute ago, job i mod jobs; its state by i (see the docstring).
SEED_RUNS = """
INSERT INTO scheduler_app_jobrun (job_id, tenant_id, scheduled_at, trigger, state, attempt, reason, created_at,
                                  enqueued_at, dispatched_at, started_at, finished_at, lease_expires_at,
                                  next_attempt_at)
SELECT job, (job - 1) %% %(tenants)s + 1, at, 'schedule', state,
       CASE WHEN state = 'dead' THEN 3 ELSE 1 END,
       CASE WHEN i < 2500 AND i >= 1500 THEN 'quota_concurrency: waiting for room'
            WHEN i < 3000 AND i >= 2500 THEN 'overlap_buffered: waiting for the run before it' ELSE '' END,
       at, enq, enq,
       CASE WHEN state IN ('pending', 'queued', 'retrying') THEN NULL
            ELSE at + make_interval(secs => 0.3 + i %% 7 * 0.1) END,
       CASE WHEN state IN ('succeeded', 'failed', 'dead') THEN at + make_interval(secs => 1.3 + i %% 7 * 0.1) END,
       CASE WHEN state = 'running' THEN now() + interval '30 seconds' END,
       CASE WHEN state = 'retrying' THEN now() + interval '60 seconds' END
  FROM (SELECT i, i %% %(jobs)s + 1 AS job,
               date_trunc('minute', now()) - interval '1 minute' - make_interval(secs => (i - %(from)s) * 0.06) AS at,
               CASE WHEN i < 1000 THEN 'queued' WHEN i < 1500 THEN 'running' WHEN i < 3000 THEN 'pending'
                    WHEN i < 3300 THEN 'retrying' WHEN i %% 100 = 7 THEN 'failed' WHEN i %% 100 = 8 THEN 'dead'
                    ELSE 'succeeded' END AS state
          FROM generate_series(%(first)s, %(last)s) AS i) AS runs,
       LATERAL (SELECT CASE WHEN state = 'pending' THEN NULL ELSE at + interval '0.1 seconds' END AS enq) AS times
"""
CHUNK = 1_000_000
HOUR_OF_RUNS = 60_000  # one every 0.06 s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="cronfleet_observe_scale")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cronfleet").rsplit("/", 1)[0]
    os.environ["DATABASE_URL"] = f"{base}/{args.database}"
    os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
    os.environ.setdefault("DJANGO_SECRET_KEY", "scale-observe-only-secret-key-not-used-anywhere")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    sys.path.insert(0, str(ROOT))
    create_database(base, args.database)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    seed(args)
    top_up(args)
    measure(args)


def create_database(base: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def seed(args) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scheduler_app_job")
        if cursor.fetchone()[0] >= args.jobs:
            print(f"seeded already: {args.jobs:,} jobs")
            return
        began = time.monotonic()
        cursor.execute("TRUNCATE scheduler_app_jobrun, scheduler_app_job, scheduler_app_tenant CASCADE")
        cursor.execute(SEED_TENANTS, {"tenants": args.tenants})
        for first in range(1, args.jobs + 1, CHUNK):
            cursor.execute(
                SEED_JOBS, {"tenants": args.tenants, "first": first, "last": min(first + CHUNK - 1, args.jobs)}
            )
        print(f"jobs: {args.jobs:,} in {time.monotonic() - began:.0f} s", flush=True)
        for first in range(0, args.runs, CHUNK):
            cursor.execute(
                SEED_RUNS,
                {
                    "tenants": args.tenants,
                    "jobs": args.jobs,
                    "first": first,
                    "from": 0,
                    "last": min(first + CHUNK, args.runs) - 1,
                },
            )
            print(f"runs: {min(first + CHUNK, args.runs):,} after {time.monotonic() - began:.0f} s", flush=True)
        for table in ("scheduler_app_tenant", "scheduler_app_job", "scheduler_app_jobrun"):
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
    connection.close()
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE scheduler_app_tenant, scheduler_app_job, scheduler_app_jobrun")
    print(f"seeded in {time.monotonic() - began:.0f} s", flush=True)


def timed(what: str, repeat: int, call) -> object:
    call()  # warm: imports, plans, caches
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = call()
        times.append((time.perf_counter() - began) * 1000)
    print(f"{what:<48} median {statistics.median(times):8.1f} ms   worst {max(times):8.1f} ms")
    return result


def top_up(args) -> None:
    """Runs for the hour before now, as the seed made them, when the seed is older than that
    (the windows of status and the stats API would be empty)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT max(scheduled_at) > now() - interval '10 minutes' FROM scheduler_app_jobrun")
        if cursor.fetchone()[0]:
            return
        cursor.execute("SELECT count(*) FROM scheduler_app_jobrun")
        count = cursor.fetchone()[0]
        cursor.execute(
            SEED_RUNS,
            {
                "tenants": args.tenants,
                "jobs": args.jobs,
                "first": count,
                "from": count,
                "last": count + HOUR_OF_RUNS - 1,
            },
        )
    print(f"topped up: {HOUR_OF_RUNS:,} runs over the hour before now")


def measure(args) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from scheduler_app import services
    from scheduler_app.models import NodeKind
    from scheduler_app.observability import cluster
    from scheduler_app.observability.nodes import Registration

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM scheduler_app_job), (SELECT count(*) FROM scheduler_app_jobrun),"
            " pg_size_pretty(pg_database_size(current_database()))"
        )
        jobs, runs, size = cursor.fetchone()
    print(f"database {args.database}: {jobs:,} jobs, {runs:,} runs, {size}")
    Registration(NodeKind.BEAT, "beat@scale:1", stale_after=15).register()
    Registration(NodeKind.WORKER, "worker@scale", stale_after=15, queues=["q0", "q1", "q2", "q3", "q4"]).register()

    timed("cluster.snapshot(depths=False): the database", args.repeat, lambda: cluster.snapshot(depths=False))
    snap = timed("cluster.snapshot(): and the broker's depths", args.repeat, cluster.snapshot)
    print(
        f"  due {snap.due_jobs:,}, oldest due {snap.oldest_due_seconds:.0f} s, in flight {snap.in_flight}, "
        f"waiting {snap.waiting}, queues {snap.queue_depths}"
    )
    with connection.cursor() as cursor:  # the worst case: every enabled job due at once

        def count_all_due():
            cursor.execute(cluster.DUE_SQL, {"now": snap.now + timedelta(days=36500), "cap": cluster.DUE_COUNT_CAP})
            return cursor.fetchone()

        everything = timed("  its due count with every job due", args.repeat, count_all_due)
        print(f"  due {everything[0]:,}")
    client = Client()
    timed("GET /metrics (whole answer)", args.repeat, lambda: client.get("/metrics", HTTP_HOST="localhost"))
    timed("manage.py status --json", args.repeat, lambda: call_command("status", "--json", stdout=StringIO()))
    _, key = services.apikey_create(tenant=None, name="scale")
    answer = timed(
        "GET /api/v1/stats/?all_tenants=true (staff)",
        args.repeat,
        lambda: client.get(
            "/api/v1/stats/?all_tenants=true", HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="localhost"
        ),
    )
    print(f"  {answer.status_code} {json.dumps(answer.json())[:400]}")
    with connection.cursor() as cursor:
        for name, statement, params in (
            ("DUE_SQL", cluster.DUE_SQL, {"now": snap.now, "cap": cluster.DUE_COUNT_CAP}),
            ("IN_FLIGHT_SQL", cluster.IN_FLIGHT_SQL, None),
        ):
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, params)
            print(f"\n{name}:\n" + "\n".join(row[0] for row in cursor.fetchall()))


if __name__ == "__main__":
    main()
