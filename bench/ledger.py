"""bench ledger: what a big ledger costs the hot paths, and how fast retention empties it.

    manage.py bench ledger --jobs N [--rows R] [--beats K] [--batch-size B] [--load L]
                           [--repeat X] [--timeout S] [--yes]

1. N cron jobs (tenants bench-0..9, queue "bench") and an empty ledger: all N due at one
   instant, K beats (not pruning); seconds until N runs are queued and N messages are in
   Redis; X times, the median (the `dispatch` scenario's spike).
2. R rows of history for those jobs (R / N runs each, spread over HISTORY_DAYS, 95 %
   succeeded, 2 % failed, 1 % each dead, skipped, cancelled), seeded with
   INSERT ... SELECT generate_series a million rows at a time (the three indexes that hold
   every row are dropped meanwhile and rebuilt from the model's definitions), then
   VACUUM ANALYZE; then the hourly stats rollup of the last 8 days (rollup.roll_up, which the
   beats run every hour), timed.
3. EXPLAIN (ANALYZE, BUFFERS) over that ledger of the claim, the runs' INSERT, the API's
   run list, stats, and one pruning batch: the indexes each uses, any sequential read of the
   ledger.
4. The API through Django's test client, as one tenant with a key: the run list (first
   page; one job; state=failed; a page 100 pages deep through cursors) and stats (1 hour,
   exact; 24 hours and 7 days, through the rollup and the live edges), p50 and p99.
5. The spike of 1 again over the big ledger: the dispatch rate against the empty ledger's.
6. Pruning while beats run: K beats pruning in the background (CRONFLEET_RETENTION_*
   defaults) while L of the jobs fire every second (1,667 is 100,000 fires a minute):
   rows deleted per second until everything the policy lets go is gone (counted before,
   followed through pg_stat_user_tables), and the load's fires per second and dispatch lag
   meanwhile. A dry-run walk afterwards checks that nothing the policy lets go is left.

The bench deletes what `bench dispatch` deletes; at the end the ledger is emptied with
TRUNCATE when it holds bench runs only (a DELETE of millions of rows would take minutes).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F
from django.test import Client
from django.test.utils import override_settings

from bench import common
from bench import dispatch as bench_dispatch
from bench.bigledger import (
    HISTORY_DAYS,
    empty_ledger,
    explain,
    restore_indexes,
    roll_up_all,
    seed_ledger,
)
from bench.e2e import Children, child_env
from scheduler_app import dispatch, services
from scheduler_app.conf import app_settings
from scheduler_app.dispatch import sql
from scheduler_app.dispatch.waker import WAKE_CHANNEL
from scheduler_app.ledger import lags, retention, rollup, stats
from scheduler_app.ledger import policy as retention_policy
from scheduler_app.models import ApiKey, Job, JobRun, RunState, Tenant, Trigger, db_now

READY_TIMEOUT = 90.0
POLL_SECONDS = 0.05
LIST_REQUESTS = 300
FILTER_REQUESTS = 100
STATS_REQUESTS = 30
DEEP_PAGE = 100
DISPATCH_TOLERANCE = 0.10
LIST_P99_MS = 50.0
STATS_MS = 200.0
PRUNE_RATE = 100_000


@dataclass
class Options:
    jobs: int
    rows: int
    beats: int
    batch_size: int
    load: int
    repeat: int
    timeout: float


@dataclass
class Report:
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (label, value, check: "ok"/"FAIL"/"")
    plans: list[tuple[str, str]] = field(default_factory=list)
    failed: bool = False

    def add(self, label: str, value: str, passed: bool | None = None) -> None:
        if passed is False:
            self.failed = True
        self.rows.append((label, value, "" if passed is None else ("ok" if passed else "FAIL")))


class BenchCommand:
    """The `manage.py bench` command as this scenario uses it: its output and Redis client,
    plus the seeding and counting helpers the dispatch scenario keeps in its own module."""

    QUEUE = "bench"

    def __init__(self, command) -> None:
        from scheduler_app.queues import redis_list_keys

        self.command, self.stdout, self.note, self.redis = command, command.stdout, command.note, command.redis
        self.queue_keys = redis_list_keys(self.QUEUE)

    def seed(self, jobs: int) -> list[int]:
        """N every-minute cron jobs over ten tenants, not due before the spikes move them."""
        started = time.monotonic()
        tenants = Tenant.objects.bulk_create(
            Tenant(slug=f"{common.PREFIX}{i}", name=f"Bench tenant {i}", timezone="UTC") for i in range(10)
        )
        far = db_now() + timedelta(days=365 * 100)
        common.seed_jobs(
            [t.id for t in tenants],
            jobs,
            cron="* * * * *",
            timezone="UTC",
            task_name="scheduler_app.echo",
            queue=self.QUEUE,
            next_run_at=far,
        )
        self.note(f"seeded {jobs} jobs in {time.monotonic() - started:.1f}s")
        return [t.id for t in tenants]

    def listeners(self) -> int:
        """Connections whose last statement was the beats' LISTEN (a beat ready for a NOTIFY)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
                [f"LISTEN {WAKE_CHANNEL}"],
            )
            return cursor.fetchone()[0]

    def redis_messages(self) -> int:
        return bench_dispatch.redis_messages(self.redis, self.QUEUE)

    def queued_runs(self, tenant_ids: list[int]) -> int:
        return bench_dispatch.queued_runs(tenant_ids)


def run(command, opts: Options) -> bool:
    command = BenchCommand(command)
    report = Report()
    note = command.note
    with connection.cursor() as cursor:  # seeding, index builds and VACUUM take minutes at 10,000,000 rows
        cursor.execute("SET statement_timeout = 0")
    restore_indexes(note)  # a run that died while seeding left them dropped
    tenant_ids = command.seed(opts.jobs)
    try:
        empty = spikes(command, tenant_ids, opts, "empty ledger")
        seeded, seconds = seed_ledger(tenant_ids, opts.rows, note)
        report.add(
            "ledger rows seeded",
            f"{seeded:,} in {seconds:.0f}s ({opts.jobs:,} jobs x {seeded // opts.jobs:,} "
            f"runs over {HISTORY_DAYS} days)",
        )
        report.add("stats rollup of the last 8 days", roll_up_all(note))
        tenant = Tenant.objects.get(id=tenant_ids[0])
        explain_all(report, tenant, tenant_ids, opts)
        measure_api(report, tenant, note)
        big = spikes(command, tenant_ids, opts, f"{seeded:,}-row ledger")
        measure_pruning(command, report, tenant_ids, opts, note)
        empty_ledger(tenant_ids, note)
        # Measured again with the ledger empty: the machine's other load drifts over the minutes
        # between, and the comparison should not depend on which side it favoured.
        empty += spikes(command, tenant_ids, opts, "empty ledger again")
        add_dispatch(report, opts, empty, big)
    finally:
        empty_ledger(tenant_ids, note)
    print_report(command.stdout.write, opts, report)
    return not report.failed


# --- beats and the spike ---------------------------------------------------------------------


class Beats:
    """K runbeat processes, started and stopped together; the dispatch scenario's spike."""

    def __init__(self, command, count: int, batch_size: int, *, prune: bool) -> None:
        self.command, self.count, self.batch_size, self.prune = command, count, batch_size, prune
        self.children = Children()

    def __enter__(self) -> Beats:
        env = {
            **child_env(),
            "CRONFLEET_QUEUE_HIGH_WATER": "0",  # no worker drains the queue
            "CRONFLEET_RETENTION_IN_BEAT": "true" if self.prune else "false",
        }
        baseline = self.command.listeners()
        for number in range(self.count):
            self.children.start(
                f"beat{number}",
                [sys.executable, str(settings.BASE_DIR / "manage.py"), "runbeat", "--batch-size", str(self.batch_size)],
                env,
            )
        # Every beat has started and (dispatch) LISTENs: it has run its first turn and sleeps.
        # A pruning beat need not sleep before it has pruned everything: its start is enough.
        self.wait(
            lambda: (
                all("runbeat: started" in self.children.log(f"beat{n}") for n in range(self.count))
                and (self.prune or self.command.listeners() >= baseline + self.count)
            )
        )
        return self

    def wait(self, ready) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready():
            if time.monotonic() > deadline or any(proc.poll() is not None for _, proc in self.children.procs):
                logs = "\n".join(self.children.log(name)[-2000:] for name, _ in self.children.procs)
                raise RuntimeError(f"bench: the beats did not start:\n{logs}")
            time.sleep(0.02)

    def __exit__(self, *exc) -> None:
        self.children.stop_all()

    def spike(self, tenant_ids: list[int], jobs: int, timeout: float) -> tuple[float | None, float]:
        """All bench jobs due now, once: seconds until their runs are queued and published,
        and the CPU seconds the beats and their database sessions spent meanwhile. The runs
        are deleted afterwards (they are the newest ids), the queue flushed."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT coalesce(max(id), 0) FROM scheduler_app_jobrun")
            watermark = cursor.fetchone()[0]
        cpu = self.children.cpu() + session_cpu()
        with transaction.atomic():
            at = db_now()
            Job.objects.filter(tenant_id__in=tenant_ids).update(next_run_at=at, end_at=at)
            services.wake_beats()
        started = time.monotonic()
        elapsed = None
        while time.monotonic() < started + timeout:
            if self.command.redis_messages() >= jobs and self.command.queued_runs(tenant_ids) >= jobs:
                elapsed = time.monotonic() - started
                break
            time.sleep(POLL_SECONDS)
        cpu = self.children.cpu() + session_cpu() - cpu
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM scheduler_app_jobrun WHERE id > %s", [watermark])
        self.command.redis.delete(*self.command.queue_keys)
        return elapsed, cpu


def spikes(command, tenant_ids: list[int], opts: Options, label: str) -> list[tuple[float | None, float]]:
    with connection.cursor() as cursor:  # every group of spikes starts from a job table without dead rows
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
    with Beats(command, opts.beats, opts.batch_size, prune=False) as beats:
        measured = [beats.spike(tenant_ids, opts.jobs, opts.timeout) for _ in range(opts.repeat)]
    command.note(f"{label}: {fmt_seconds(measured)}")
    return measured


def fmt_seconds(values: list[tuple[float | None, float]]) -> str:
    return ", ".join("timeout" if v is None else f"{v:.2f}s" for v, _ in values)


def add_dispatch(report: Report, opts: Options, empty: list, big: list) -> None:
    if any(v is None for v, _ in empty + big):
        report.add("dispatch spike", f"timed out: empty {fmt_seconds(empty)}; big {fmt_seconds(big)}", False)
        return

    def rate(values) -> float:
        return opts.jobs / statistics.median(v for v, _ in values)

    def cpu_ms(values) -> float:  # CPU of beats and their database sessions per 1,000 fires
        return statistics.median(c for _, c in values) / opts.jobs * 1e6

    empty_rate, big_rate = rate(empty), rate(big)
    change, cpu_change = big_rate / empty_rate - 1, cpu_ms(big) / cpu_ms(empty) - 1
    report.add(
        f"dispatch, empty ledger (fires/s, median of {len(empty)}: before and after)",
        f"{empty_rate:,.0f}  ({fmt_seconds(empty)})",
    )
    report.add(
        f"dispatch, {opts.rows:,}-row ledger (fires/s, median of {len(big)})",
        f"{big_rate:,.0f}  ({fmt_seconds(big)}; {change:+.1%})",
        change >= -DISPATCH_TOLERANCE,
    )
    report.add(
        "dispatch CPU per 1,000 fires (beats + their sessions)",
        f"empty {cpu_ms(empty):.0f} ms, big {cpu_ms(big):.0f} ms ({cpu_change:+.1%})",
        cpu_change <= DISPATCH_TOLERANCE,
    )


# --- EXPLAIN ----------------------------------------------------------------------------------


def queryset_sql(queryset) -> tuple[str, tuple]:
    compiled = queryset.query.get_compiler(using=queryset.db)
    return compiled.as_sql()


def explain_all(report: Report, tenant: Tenant, tenant_ids: list[int], opts: Options) -> None:
    now = db_now()
    job = Job.objects.filter(tenant=tenant).order_by("id").first()
    runs = JobRun.objects.annotate(job_name=F("job__name")).filter(tenant=tenant).defer("result", "error")
    newest = ("-scheduled_at", "-id")
    window = (
        JobRun.objects.filter(tenant_id=tenant.id, scheduled_at__gt=now - timedelta(hours=1), scheduled_at__lte=now)
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
    )
    edge = now - timedelta(days=7)
    statements = [
        ("API run list, first page", *queryset_sql(runs.order_by(*newest)[:51])),
        ("API run list, ?job=", *queryset_sql(runs.filter(job_id=job.id).order_by(*newest)[:51])),
        ("API run list, ?state=failed", *queryset_sql(runs.filter(state=RunState.FAILED).order_by(*newest)[:51])),
        ("stats, 1 hour (exact): counts", *queryset_sql(window)),
        (
            "stats, 1 hour (exact): lag percentiles",
            stats.LAGS_SQL.format(scope=lags.ONE_TENANT),
            {
                "percentiles": list(stats.PERCENTILES),
                "tenant_id": tenant.id,
                "since": now - timedelta(hours=1),
                "until": now,
                "trigger": Trigger.SCHEDULE.value,
            },
        ),
        (
            "stats, 7 days: the rolled-up hours",
            rollup.ROLLED_SQL,
            {"key": tenant.id, "start": rollup.floor_hour(edge) + rollup.HOUR, "end": rollup.floor_hour(now)},
        ),
        (
            "stats, 7 days: the oldest edge, live",
            rollup.pieces_sql(lags.ONE_TENANT, by_hour=False),
            {"tenant_id": tenant.id, "start": edge, "end": rollup.floor_hour(edge) + rollup.HOUR},
        ),
    ]
    for label, statement, params in statements:
        add_plan(report, label, statement, params)
    # The claim and the insert of a batch of runs, with every bench job due (rolled back).
    with transaction.atomic():
        Job.objects.filter(tenant_id__in=tenant_ids).update(next_run_at=now)
        add_plan(
            report,
            f"claim of {opts.batch_size} due jobs (FAIR_CLAIM)",
            dispatch.claim.fair_claim_sql(),
            {"now": now, "limit": opts.batch_size},
        )
        claimed = list(
            Job.objects.filter(tenant_id__in=tenant_ids)
            .order_by("id")
            .values_list("id", "tenant_id")[: opts.batch_size]
        )
        transaction.set_rollback(True)
    rows = {
        "now": now,
        "job_id": [c[0] for c in claimed],
        "tenant_id": [c[1] for c in claimed],
        "scheduled_at": [now] * len(claimed),
        "state": [RunState.QUEUED.value] * len(claimed),
        "reason": [""] * len(claimed),
        "job_version": [1] * len(claimed),
        "priority": [5] * len(claimed),
    }
    add_plan(report, f"insert of {len(claimed)} runs (INSERT_RUNS_PG)", sql.INSERT_RUNS_PG, rows)
    pruner = retention.Pruner()
    pruner.refresh(pruner.clock())
    units = [unit for unit in pruner.units.values() if unit.kind == "tenant" and unit.key in tenant_ids]
    statement, params = retention.batch_statement(units, now, limit=app_settings.RETENTION_BATCH_SIZE)
    add_plan(
        report,
        f"one pruning batch ({app_settings.RETENTION_BATCH_SIZE} runs looked at)",
        statement,
        params,
        retention.PLANNER_SETTINGS,
    )


def add_plan(report: Report, label: str, statement: str, params, setup: str = "") -> None:
    took, indexes, seq = explain(statement, params, setup)
    ledger_seq = JobRun._meta.db_table in seq
    report.plans.append(
        (f"{label}: {took:.1f} ms", f"indexes: {', '.join(indexes) or 'none'}; sequential: {', '.join(seq) or 'none'}")
    )
    if ledger_seq:
        report.failed = True
        report.plans.append(("  FAIL", "reads the whole ledger"))


# --- the API ------------------------------------------------------------------------------------


def measure_api(report: Report, tenant: Tenant, note) -> None:
    Tenant.objects.filter(id=tenant.id).update(api_requests_per_minute=10**9)
    key, raw = services.apikey_create(tenant=tenant, name="bench ledger")
    try:
        time_requests(report, tenant, Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {raw}"), note)
    finally:
        ApiKey.objects.filter(id=key.id).delete()  # `clean` deletes tenants, not keys


def time_requests(report: Report, tenant: Tenant, client: Client, note) -> None:
    job = Job.objects.filter(tenant=tenant).order_by("id").first()
    with override_settings(CRONFLEET_API_TENANT_REQUESTS_PER_MINUTE=10**9):
        deep, depth = "/api/v1/runs/?limit=50", 1
        while depth < DEEP_PAGE and (following := client.get(deep).json()["next"]):
            deep, depth = following.split("localhost", 1)[1], depth + 1
        cases = [
            ("API run list, first page (50 runs)", "/api/v1/runs/", LIST_REQUESTS, LIST_P99_MS),
            ("API run list, ?job=", f"/api/v1/runs/?job={job.id}", FILTER_REQUESTS, LIST_P99_MS),
            ("API run list, ?state=failed", "/api/v1/runs/?state=failed", FILTER_REQUESTS, LIST_P99_MS),
            (f"API run list, page {depth} (cursor)", deep, FILTER_REQUESTS, LIST_P99_MS),
            ("API stats, 1 hour (exact)", "/api/v1/stats/?window=3600", STATS_REQUESTS, STATS_MS),
            ("API stats, 24 hours (rollup)", "/api/v1/stats/?window=86400", STATS_REQUESTS, STATS_MS),
            ("API stats, 7 days (rollup)", "/api/v1/stats/?window=604800", STATS_REQUESTS, STATS_MS),
        ]
        for label, path, count, limit in cases:
            for _ in range(5):  # warm: imports, plans, the caches
                assert client.get(path).status_code == 200
            times = []
            for _ in range(count):
                started = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.content[:500]
            p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
            report.add(f"{label} p50 / p99 ms", f"{p50:.1f} / {p99:.1f}  ({count} requests)", p99 < limit)
            note(f"{label}: p50 {p50:.1f} ms, p99 {p99:.1f} ms")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


# --- pruning while beats run ----------------------------------------------------------------------


def session_cpu() -> float:
    """CPU seconds used so far by the PostgreSQL backends connected to this database, but
    this command's own (its polling is not the beats' work)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        pids = [row[0] for row in cursor.fetchall()]
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass  # not on this host, or gone
    return total


def deleted_so_far() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = %s", [JobRun._meta.db_table])
        return cursor.fetchone()[0]


def prunable(tenant_ids: list[int]) -> int:
    """Runs the settings' policy lets go now (bench tenants set none of their own; the
    seeded history keeps every job's newest runs well inside the days)."""
    policy = retention_policy.resolve()[0]
    now = db_now()
    failed_days = policy.kept_days(failed=True)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FILTER (WHERE state = ANY(%(others)s) AND finished_at < %(cutoff)s)
                 + count(*) FILTER (WHERE state = ANY(%(failed)s) AND finished_at < %(failed_cutoff)s)
              FROM scheduler_app_jobrun WHERE tenant_id = ANY(%(tenants)s)
        """,
            {
                "others": retention.OTHERS,
                "failed": retention.FAILED,
                "tenants": tenant_ids,
                "cutoff": now - timedelta(days=policy.days) if policy.days else now - timedelta(days=10**5),
                "failed_cutoff": now - timedelta(days=failed_days) if failed_days else now - timedelta(days=10**5),
            },
        )
        return cursor.fetchone()[0]


def measure_pruning(command, report: Report, tenant_ids: list[int], opts: Options, note) -> None:
    expected = prunable(tenant_ids)
    policy = retention_policy.resolve()[0]
    note(f"pruning: {expected:,} runs to delete ({policy}); {opts.load} jobs firing every second meanwhile")
    load_ids = list(
        Job.objects.filter(tenant_id__in=tenant_ids).order_by("id").values_list("id", flat=True)[: opts.load]
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM scheduler_app_jobrun")
        watermark = cursor.fetchone()[0]
    before = deleted_so_far()
    anchor = db_now()
    Job.objects.filter(id__in=load_ids).update(
        cron="", every_seconds=1, anchor_at=anchor, run_at=None, end_at=None, next_run_at=anchor
    )
    elapsed = None
    try:
        with Beats(command, opts.beats, opts.batch_size, prune=True) as beats:
            started = time.monotonic()
            started_at = db_now()
            cpu_before = beats.children.cpu() + session_cpu()
            while time.monotonic() < started + opts.timeout:
                if deleted_so_far() - before >= expected:
                    elapsed = time.monotonic() - started
                    break
                time.sleep(0.25)
            finished_at = db_now()
            cpu = beats.children.cpu() + session_cpu() - cpu_before
    finally:  # back to the spike's jobs
        Job.objects.filter(id__in=load_ids).update(
            cron="* * * * *", every_seconds=None, anchor_at=None, next_run_at=None
        )
    deleted = deleted_so_far() - before
    if elapsed is None:
        report.add(
            f"pruning while {opts.beats} beat(s) run",
            f"timeout after {opts.timeout:.0f}s: {deleted:,} of {expected:,} deleted",
            False,
        )
    else:
        rate = deleted / elapsed
        report.add(
            f"pruning while {opts.beats} beat(s) run (rows/s)",
            f"{rate:,.0f}  ({deleted:,} runs in {elapsed:.1f}s; load average {os.getloadavg()[0]:.1f})",
            rate >= PRUNE_RATE,
        )
        report.add(
            "  CPU of the beats and their database sessions",
            f"{cpu:.1f}s for the deletes and the load together: {deleted / cpu:,.0f} rows deleted per CPU second",
        )
    load_report(report, load_ids, watermark, started_at, finished_at, opts)
    left = retention.prune_everything(retention.once_through(dry_run=True))
    report.add(
        "left that the policy lets go (dry-run walk after)",
        f"{left.doomed:,} of {left.examined:,} looked at",
        left.doomed == 0,
    )
    command.redis.delete(*command.queue_keys)


def load_report(
    report: Report, load_ids: list[int], watermark: int, since: datetime, until: datetime, opts: Options
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - scheduled_at)),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - scheduled_at))
              FROM scheduler_app_jobrun
             WHERE id > %(watermark)s AND job_id = ANY(%(jobs)s) AND scheduled_at >= %(since)s
               AND scheduled_at < %(until)s
        """,
            {"watermark": watermark, "jobs": load_ids, "since": since, "until": until},
        )
        fires, p50, p99 = cursor.fetchone()
    seconds = (until - since).total_seconds()
    report.add(
        f"load meanwhile: {opts.load:,} jobs every second",
        f"{fires / seconds:,.0f} fires/s recorded, "
        f"dispatch lag p50 {float(p50 or 0):.2f}s / p99 {float(p99 or 0):.2f}s",
    )


# --- the table ---------------------------------------------------------------------------------


def print_report(out, opts: Options, report: Report) -> None:
    db = settings.DATABASES["default"]
    policy = retention_policy.resolve()[0]
    out(
        f"bench ledger on PostgreSQL {db['NAME']!r}, {os.cpu_count()} CPUs, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
        + f"; {opts.jobs:,} jobs, {opts.beats} beat(s), batch {opts.batch_size}; retention {policy.days} days, "
        f"failed {policy.kept_days(failed=True) or 0}, keep last {policy.keep_last}, "
        f"batch {app_settings.RETENTION_BATCH_SIZE}"
    )
    width = max(len(label) for label, _, _ in report.rows) + 2
    for label, value, check in report.rows:
        out(f"  {label:<{width}}{value}  {check}".rstrip())
    out("  EXPLAIN (ANALYZE) over the big ledger")
    for label, detail in report.plans:
        out(f"    {label}")
        out(f"      {detail}")
