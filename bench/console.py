"""bench console: each console page's whole server-side render time over a big ledger.

    manage.py bench console --jobs N [--rows R] [--requests X]

1. A ledger of R finished runs for N jobs over ten tenants "console-0..9", seeded with the
   ledger bench's statement (bigledger.seed_ledger: a million rows a statement, the big indexes
   rebuilt after, VACUUM ANALYZE) and kept between runs: `bench` deletes "bench-*" tenants
   only, and a ledger of ten million rows takes many minutes to seed. A later run reuses it
   when it holds at least R rows (pass --reseed to start over). The day's RunMinute rollup
   is brought up to date as the beats would (dashboard.roll_up).
2. While measuring, the jobs are enabled with their next fires spread over the next hour
   (the dashboard's forecast has something to expand); they are disabled again at the end,
   so no beat of another scenario would fire them (the other scenarios refuse to start
   while they are enabled; `bench console` itself runs no beat and disables them first).
3. A staff user logged in through Django's test Client (the whole stack: middleware,
   sessions, the admin's views and templates) requests each page X times: dashboard,
   tenant dashboard, job list, job page, run ledger (first page, each filter, search,
   deep page), run page, alerts. Median and p95 in ms; the dashboard's target is < 300 ms.
4. With --explain: every statement each page ran (captured from one request), EXPLAIN
   (ANALYZE, BUFFERS) of each SELECT: its time, the indexes used, the tables read
   sequentially; the whole plan of any statement over SLOW_MS or reading the ledger
   sequentially. A check fails on either.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse
from django.utils import timezone

from bench import bigledger, common
from scheduler_app.models import Job, JobRun, Tenant, db_now
from scheduler_app.observability import dashboard

PREFIX = "console-"  # not "bench-": `bench` keeps these tenants (and their ledger) between runs
TENANTS = 10
STAFF = "console-bench-staff"
DASHBOARD_MS = 300.0
SLOW_MS = 50.0  # a statement of a console page over this (EXPLAIN ANALYZE) is reported as slow
# A sequential read of the ledger fails the check from this size on (below it the planner
# rightly prefers one to an index).
SEQ_CHECK_ROWS = 1_000_000
# Every-five-minutes jobs, their first fires spread over the next hour while measuring.
CRON = "*/5 * * * *"


@dataclass
class Options:
    jobs: int
    rows: int
    requests: int
    reseed: bool
    explain: bool = False


def run(command, opts: Options) -> bool:
    note = command.note
    with connection.cursor() as cursor:  # seeding, index builds and VACUUM take minutes at 10,000,000 rows
        cursor.execute("SET statement_timeout = 0")
    bigledger.restore_indexes(note)  # a run that died while seeding left them dropped
    tenant_ids, rows = prepare(opts, note)
    rolled = dashboard.roll_up(db_now(), max_minutes=24 * 60)
    note(f"rolled up {rolled} minutes of the last day")
    schedule_jobs(tenant_ids)
    try:
        results = measure(tenant_ids, opts.requests, note)
        plans_ok = explain_pages(command.stdout.write, tenant_ids, rows) if opts.explain else True
    finally:
        Job.objects.filter(tenant_id__in=tenant_ids).update(enabled=False)
    return print_report(command.stdout.write, opts, rows, results) and plans_ok


def prepare(opts: Options, note) -> tuple[list[int], int]:
    """The console tenants' ids and the rows in their ledger: reused when there are enough."""
    tenants = list(Tenant.objects.filter(slug__startswith=PREFIX).order_by("id").values_list("id", flat=True))
    rows = JobRun.objects.filter(tenant_id__in=tenants).count() if tenants else 0
    jobs = Job.objects.filter(tenant_id__in=tenants).count() if tenants else 0
    if tenants and rows >= opts.rows and jobs == opts.jobs and not opts.reseed:
        note(f"reusing the console ledger: {rows:,} runs of {jobs:,} jobs")
        Job.objects.filter(tenant_id__in=tenants).update(enabled=False)  # an interrupted run left them enabled
        return tenants, rows
    if tenants:
        note("deleting the console tenants to seed again")
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM scheduler_app_auditevent WHERE tenant_id = ANY(%s)", [tenants])
            cursor.execute("DELETE FROM scheduler_app_alert WHERE tenant_id = ANY(%s)", [tenants])
            cursor.execute("DELETE FROM scheduler_app_jobrun WHERE tenant_id = ANY(%s)", [tenants])
            cursor.execute("DELETE FROM scheduler_app_job WHERE tenant_id = ANY(%s)", [tenants])
            cursor.execute("DELETE FROM scheduler_app_tenant WHERE id = ANY(%s)", [tenants])
    created = Tenant.objects.bulk_create(
        Tenant(slug=f"{PREFIX}{i}", name=f"Console bench tenant {i}", timezone="UTC") for i in range(TENANTS)
    )
    tenants = [t.id for t in created]
    common.seed_jobs(
        tenants,
        opts.jobs,
        cron=CRON,
        timezone="UTC",
        task_name="scheduler_app.echo",
        queue="console",
        enabled=False,
        next_run_at=None,
    )
    rows, seconds = bigledger.seed_ledger(tenants, opts.rows, note)
    note(f"seeded {rows:,} runs in {seconds:.0f}s")
    return tenants, rows


def schedule_jobs(tenant_ids: list[int]) -> None:
    """Enable the jobs with their next fires spread over the coming hour, on the five-minute
    marks their cron gives (what the dashboard's forecast reads)."""
    now = db_now()
    first = dashboard.truncate(now, timedelta(minutes=5)) + timedelta(minutes=5)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_app_job SET enabled = true, "
            "next_run_at = %s + mod(id, 12) * interval '5 minutes' WHERE tenant_id = ANY(%s)",
            [first, tenant_ids],
        )


def pages(tenant_ids: list[int]) -> list[tuple[str, str]]:
    """(label, URL) of every console page measured, with real ids from the seeded ledger."""
    job = Job.objects.filter(tenant_id=tenant_ids[0]).order_by("id").first()
    tenant = Tenant.objects.get(id=tenant_ids[0])
    run = JobRun.objects.filter(job_id=job.id).order_by("-scheduled_at").first()
    failed = JobRun.objects.filter(job_id=job.id, state="failed").order_by("-scheduled_at").first() or run
    # The admin's date filter ("past 7 days") as DateFieldListFilter writes it.
    today = timezone.localtime(run.scheduled_at).date()
    week = (
        f"scheduled_at__gte={today - timedelta(days=7)}+00:00:00%2B00:00"
        f"&scheduled_at__lt={today + timedelta(days=1)}+00:00:00%2B00:00"
    )
    runs = reverse("admin:scheduler_app_jobrun_changelist")
    # The deepest page the capped count allows is 101 (100 rows a page); a small ledger has fewer.
    deep = last_page(JobRun.objects.all(), 100)
    deep_failed = last_page(JobRun.objects.filter(state="failed"), 50)
    return [
        ("dashboard", reverse("cronfleet:dashboard")),
        ("tenant dashboard", f"{reverse('cronfleet:dashboard')}?tenant={tenant.slug}"),
        ("job list", reverse("admin:scheduler_app_job_changelist")),
        ("job page", reverse("admin:scheduler_app_job_change", args=[job.id])),
        ("run ledger", runs),
        ("ledger: state=failed", f"{runs}?state__exact=failed"),
        ("ledger: state=dead", f"{runs}?state__exact=dead"),
        ("ledger: trigger=manual", f"{runs}?trigger__exact=manual"),
        ("ledger: tenant", f"{runs}?tenant__id__exact={tenant.id}"),
        ("ledger: past 7 days", f"{runs}?{week}"),
        ("ledger: failed, past 7 days", f"{runs}?state__exact=failed&{week}"),
        ("ledger: tenant + failed", f"{runs}?tenant__id__exact={tenant.id}&state__exact=failed"),
        ("ledger: search job name", f"{runs}?q={job.name}"),
        ("ledger: search tenant/job", f"{runs}?q={tenant.slug}/{job.name}"),
        ("ledger: search fire key", f"{runs}?q={run.fire_key}"),
        # Column headers: the admin orders by list_display's index (1 job, 2 fire time, 7 finished).
        ("ledger: oldest id first", f"{runs}?o=0"),
        ("ledger: ordered by job", f"{runs}?o=1"),
        ("ledger: ordered by fire time", f"{runs}?o=-2"),
        ("ledger: ordered by finished", f"{runs}?o=-7"),
        (f"ledger: page {deep}", f"{runs}?p={deep}"),
        (f"ledger: failed, page {deep_failed}", f"{runs}?state__exact=failed&p={deep_failed}"),
        ("run page", reverse("admin:scheduler_app_jobrun_change", args=[failed.id])),
        ("alerts", reverse("admin:scheduler_app_alert_changelist")),
    ]


def last_page(runs, at_most: int) -> int:
    found = runs.order_by()[: at_most * 100].count()
    return max(1, min(at_most, (found + 99) // 100))


def staff_client() -> Client:
    user, _ = get_user_model().objects.get_or_create(username=STAFF, defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    return client


def measure(tenant_ids: list[int], requests: int, note) -> list[tuple[str, str, list[float]]]:
    client = staff_client()
    results = []
    # DEBUG off (no query log growing), the admin served as in production.
    with override_settings(DEBUG=False, ALLOWED_HOSTS=["testserver"]):
        for label, url in pages(tenant_ids):
            response = client.get(url)  # warm: templates compiled, plans cached, pages in memory
            if response.status_code != 200:
                raise RuntimeError(f"bench console: {label} ({url}) answered {response.status_code}")
            times = []
            for _ in range(requests):
                began = time.perf_counter()
                client.get(url)
                times.append((time.perf_counter() - began) * 1000)
            note(f"{label}: median {statistics.median(times):.0f} ms")
            results.append((label, url, times))
    return results


def p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def print_report(write, opts: Options, rows: int, results) -> bool:
    write(
        f"\nbench console: {rows:,} runs of {opts.jobs:,} jobs, {opts.requests} requests a page "
        "(Django test Client, logged-in superuser, DEBUG off)\n"
    )
    write(f"{'page':32} {'median ms':>10} {'p95 ms':>10}  URL")
    ok = True
    for label, url, times in results:
        check = ""
        if label == "dashboard":
            passed = statistics.median(times) < DASHBOARD_MS
            ok = ok and passed
            check = f"  {'ok' if passed else 'FAIL'} (< {DASHBOARD_MS:.0f} ms)"
        write(f"{label:32} {statistics.median(times):10.1f} {p95(times):10.1f}  {url}{check}")
    return ok


def explain_pages(write, tenant_ids: list[int], rows: int) -> bool:
    """EXPLAIN (ANALYZE, BUFFERS) of every SELECT each page runs; False if one is slow or
    (from SEQ_CHECK_ROWS runs on) reads the ledger sequentially."""
    client = staff_client()
    ok = True
    write(f"\nEXPLAIN (ANALYZE, BUFFERS) of each page's statements (slow: over {SLOW_MS:.0f} ms)\n")
    with override_settings(DEBUG=False, ALLOWED_HOSTS=["testserver"]):
        for label, url in pages(tenant_ids):
            with CaptureQueriesContext(connection) as captured:
                client.get(url)
            write(f"{label}: {url}")
            for query in captured.captured_queries:
                sql = query["sql"]
                if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "django_session" in sql:
                    continue
                ms, indexes, seq = bigledger.explain(sql, None)
                bad = ms > SLOW_MS or (JobRun._meta.db_table in seq and rows >= SEQ_CHECK_ROWS)
                ok = ok and not bad
                write(
                    f"  {ms:8.1f} ms{' SLOW' if bad else ''}  {', '.join(indexes) or '-'}"
                    f"{'  SEQ ' + ', '.join(seq) if seq else ''}\n      {' '.join(sql.split())[:300]}"
                )
                if bad:
                    with transaction.atomic(), connection.cursor() as cursor:
                        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                        write("\n".join("        " + row[0] for row in cursor.fetchall()))
                        transaction.set_rollback(True)
    return ok
