#!/usr/bin/env python3
"""Seed a big run ledger for the console's EXPLAIN checks and the dashboard's timing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cf_big DJANGO_DEBUG=true \\
        .venv/bin/python bench/scripts/seed_ledger.py --runs 10000000

Migrates the database, then makes --tenants tenants and --jobs jobs (every minute, cron
and interval, some paused) and --runs runs spread evenly over the --days days before now (--append goes on from the
runs already there, after an interruption)
(about 1,000 a minute with the defaults), in chunks of one million rows, each one
`INSERT ... SELECT ... FROM generate_series(...)`: mostly succeeded, a few percent failed,
dead, retrying or skipped, with start lags and durations that vary by run; the last few
minutes queued and running. Then ANALYZE. Refuses a database that already has runs unless
--append. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout (this is bench/scripts/)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

CHUNK = 1_000_000

JOBS_SQL = """
INSERT INTO scheduler_app_job (tenant_id, name, description, tags, cron, timezone, every_seconds, jitter_seconds,
       jitter_seed, enabled, paused_note, next_run_at, target_kind, task_name, args, kwargs, target_config, queue,
       priority, timeout_seconds, batch, max_attempts, retry_backoff_seconds, retry_backoff_max_seconds,
       misfire_policy, catchup_window_seconds, run_all_cap, overlap_policy, version, created_at, updated_at)
SELECT tenant.id, 'job-' || n, '', '[]', CASE WHEN n %% 3 = 0 THEN '' ELSE '* * * * *' END, 'UTC',
       CASE WHEN n %% 3 = 0 THEN 60 + (n %% 4) * 60 ELSE NULL END, 0, n, n %% 50 <> 0, '',
       date_trunc('minute', now()) + interval '1 minute', 'task', 'scheduler_app.echo', '[]', '{}', '{}', '', 5, 300,
       false, 3, 10, 3600, 'run_once', 86400, 100, 'allow', 1, now(), now()
  FROM generate_series(1, %(jobs)s) AS n
  JOIN scheduler_app_tenant AS tenant ON tenant.slug = 'seed-' || (n %% %(tenants)s)
"""

# Run i of the ledger is scheduled at start + i * step, for job number (i mod jobs).
# hashtext(i) gives each run a stable pseudo-random draw for its state, lag and duration.
RUNS_SQL = """
INSERT INTO scheduler_app_jobrun (job_id, tenant_id, scheduled_at, trigger, state, attempt, reason, job_version,
       priority, created_at, enqueued_at, dispatched_at, started_at, heartbeat_at, finished_at, worker,
       celery_task_id, result, error, duplicate_deliveries, attempts)
SELECT job.id, job.tenant_id, fire.at,
       CASE WHEN (draw.r / 100) %% 1000 = 0 THEN 'manual' WHEN (draw.r / 100) %% 1000 = 1 THEN 'backfill' ELSE 'schedule' END,
       fire.state, CASE WHEN fire.state IN ('dead', 'retrying') THEN 2 ELSE 1 END,
       CASE WHEN fire.state = 'skipped' THEN 'overlap: skipped' ELSE '' END, 1, 5,
       fire.at, fire.at + lag.dispatch, fire.at + lag.dispatch,
       CASE WHEN fire.state IN ('skipped', 'queued') THEN NULL ELSE fire.at + lag.start END,
       CASE WHEN fire.state IN ('skipped', 'queued') THEN NULL ELSE fire.at + lag.start END,
       CASE WHEN fire.state IN ('queued', 'running') THEN NULL WHEN fire.state = 'skipped' THEN fire.at
            ELSE fire.at + lag.start + lag.took END,
       CASE WHEN fire.state IN ('skipped', 'queued') THEN '' ELSE 'celery@worker-' || (draw.r %% 4) END, '', '',
       CASE WHEN fire.state IN ('failed', 'dead', 'retrying')
            THEN 'RuntimeError: upstream answered 503 Service Unavailable for run ' || fire.i ELSE '' END,
       0, '[]'::jsonb
  FROM generate_series(%(first)s, %(last)s) AS g (i)
 CROSS JOIN LATERAL (SELECT abs(hashtext(g.i::text)) AS r) AS draw
 CROSS JOIN LATERAL (
       SELECT g.i, %(start)s::timestamptz + g.i * %(step)s * interval '1 second' AS at,
              CASE WHEN %(start)s::timestamptz + g.i * %(step)s * interval '1 second' > now() - interval '20 seconds'
                   THEN (CASE WHEN draw.r %% 2 = 0 THEN 'queued' ELSE 'running' END)
                   WHEN draw.r %% 100 < 2 THEN 'failed' WHEN draw.r %% 100 = 2 THEN 'dead'
                   WHEN draw.r %% 100 = 3 THEN 'skipped' WHEN draw.r %% 200 = 9 THEN 'retrying'
                   ELSE 'succeeded' END AS state) AS fire
 CROSS JOIN LATERAL (
       SELECT (draw.r %% 50) * interval '1 millisecond' AS dispatch,
              (50 + draw.r %% 900 + CASE WHEN draw.r %% 97 = 0 THEN 20000 ELSE 0 END) * interval '1 millisecond' AS start,
              (100 + (draw.r / 7) %% 8000) * interval '1 millisecond' AS took) AS lag
  JOIN scheduler_app_job AS job ON job.name = 'job-' || (1 + g.i %% %(jobs)s)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--append", action="store_true")
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM scheduler_app_jobrun)")
        if cursor.fetchone()[0] and not options.append:
            sys.exit("seed_ledger: the ledger already has runs (--append to add more)")
        cursor.execute(
            "INSERT INTO scheduler_app_tenant (slug, name, timezone, is_active, webhook_secret_encrypted,"
            " webhook_secret_previous_encrypted, min_interval_seconds, weight, created_at)"
            " SELECT 'seed-' || n, 'Seed tenant ' || n, 'UTC', true, '', '', 0, 1, now()"
            " FROM generate_series(0, %s - 1) AS n ON CONFLICT (slug) DO NOTHING",
            [options.tenants],
        )
        cursor.execute("SELECT count(*) FROM scheduler_app_job WHERE name LIKE 'job-%%'")
        if not cursor.fetchone()[0]:
            cursor.execute(JOBS_SQL, {"jobs": options.jobs, "tenants": options.tenants})
        cursor.execute("SELECT now() - %s * interval '1 day'", [options.days])
        start = cursor.fetchone()[0]
        step = options.days * 86400 / options.runs
        # --append after an interrupted seed: go on from the last run made, on the same clock.
        cursor.execute("SELECT count(*), min(scheduled_at) FROM scheduler_app_jobrun")
        done, earliest = cursor.fetchone()
        if done:
            start = earliest - timedelta(seconds=step)
    for first in range(done + 1, options.runs + 1, CHUNK):
        last = min(first + CHUNK - 1, options.runs)
        began = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 0")
            cursor.execute(RUNS_SQL, {"first": first, "last": last, "start": start, "step": step, "jobs": options.jobs})
        print(f"runs {first:,}-{last:,}: {time.monotonic() - began:.1f} s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_jobrun")
        cursor.execute("ANALYZE scheduler_app_job")
    print("seed_ledger: done")


if __name__ == "__main__":
    main()
