"""bench tasks: N calls of a no-op django.tasks task enqueued on Cronfleet's backend, one
enqueue() each in its own transaction, run by real Celery workers until every run has finished;
beside it, in the same command, N plain Celery calls of a no-op task (`apply_async` to the
floor's queue, what `.delay()` does with a route) on the same broker, worker settings and
worker count (floor.py).

Printed for each: the seconds the N calls took the caller, calls enqueued per second, the
seconds from the first call to the last finish and the calls finished per second; for
Cronfleet also the start lag (started - recorded) p50/p99 and the database statements one
enqueue() costs (counted over STATEMENT_SAMPLE calls in a transaction rolled back).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bench import e2e, floor
from bench.common import Children
from scheduler_app.models import JobRun, RunState, Tenant, db_now
from scheduler_app.queues import redis_list_keys

QUEUE = "bench-tasks"
TENANT = "bench-tasks"  # bench/tasks_settings.py's OPTIONS TENANT
STATEMENT_SAMPLE = 100
POLL_SECONDS = 0.25
UNFINISHED = (RunState.PENDING, RunState.QUEUED, RunState.RUNNING, RunState.RETRYING)


class Rollback(Exception):
    pass


@dataclass
class Options:
    jobs: int
    workers: int
    concurrency: int
    pool: str
    timeout: float
    floor: bool = True
    repeat: int = 1


@dataclass
class Result:
    label: str
    calls: int = 0
    enqueue_seconds: float | None = None
    seconds: float | None = None
    lag: tuple[float, float] | None = None
    statements: float | None = None
    checks: list[tuple[str, str, bool]] = field(default_factory=list)


def worker_env() -> dict[str, str]:
    return {**e2e.child_env(), "DJANGO_SETTINGS_MODULE": "bench.tasks_settings"}


def measure_floor(opts: Options, note) -> Result:
    """N plain Celery calls of a no-op, one message each, timed until the floor's queue has
    drained (e2e.drain_floor)."""

    def publish() -> None:
        for number in range(opts.jobs):
            floor.noop.apply_async(args=[number], queue=floor.QUEUE)

    done, enqueued, seconds, _ = e2e.drain_floor(opts, note, f"{opts.jobs} calls, one message each", publish)
    result = Result("plain Celery .delay() (floor)", done, enqueued, seconds, statements=0)
    result.checks.append(("floor: every call ran", f"{done}/{opts.jobs}", done == opts.jobs))
    return result


def statements_per_enqueue(noop) -> float:
    """Statements one enqueue() sends, over STATEMENT_SAMPLE calls in a transaction that is
    then rolled back (nothing is kept or published)."""
    noop.enqueue(-1)  # warm: the backend, the tenant, the statements' first plans
    with CaptureQueriesContext(connection) as captured:
        try:
            with transaction.atomic():
                for number in range(STATEMENT_SAMPLE):
                    noop.enqueue(-2 - number)
                raise Rollback
        except Rollback:
            pass
    # Less the savepoint pair each nested atomic() adds inside the sample's transaction.
    return (len(captured.captured_queries) - 2) / STATEMENT_SAMPLE - 2


def measure_cronfleet(opts: Options, note, clean) -> Result:
    # Here, not at the top: the task needs Django's task API (the bench's other scenarios run
    # without it), and the Celery app module is imported by the scenario that uses it (e2e.py).
    from bench.taskdefs import noop
    from project.celery import app as project_app

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(*redis_list_keys(QUEUE))
    clean()
    tenant = Tenant.objects.create(slug=TENANT, name="Bench django.tasks")
    result = Result("django.tasks on Cronfleet")
    result.statements = statements_per_enqueue(noop)
    children = Children()
    try:
        names = e2e.start_workers(children, "project", QUEUE, opts, worker_env())
        e2e.wait_ready(project_app, names, children)
        note(f"cronfleet: {opts.workers} worker(s) ready; {opts.jobs} enqueue() calls, each in its own transaction")
        start_at, started = db_now(), time.monotonic()
        for number in range(opts.jobs):
            noop.enqueue(number)
        result.enqueue_seconds = time.monotonic() - started
        deadline = started + opts.timeout
        while time.monotonic() < deadline:
            if not JobRun.objects.filter(tenant=tenant, state__in=UNFINISHED).exists():
                break
            time.sleep(POLL_SECONDS)
    finally:
        children.stop_all()
        client.delete(*redis_list_keys(QUEUE))
        client.close()
    return ledger_figures(result, tenant, start_at, opts.jobs + 1)  # and the warm-up call


def ledger_figures(result: Result, tenant: Tenant, start_at, calls: int) -> Result:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT count(*) FILTER (WHERE state = 'succeeded'), count(DISTINCT job_id),
                   coalesce(max(jsonb_array_length(attempts)), 0),
                   extract(epoch FROM max(finished_at) - %(start)s),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
              FROM {JobRun._meta.db_table} WHERE tenant_id = %(tenant)s
            """,
            {"start": start_at, "tenant": tenant.id},
        )
        succeeded, jobs, most_attempts, seconds, p50, p99 = cursor.fetchone()
    result.calls, result.seconds = succeeded, float(seconds) if seconds else None
    result.lag = (float(p50 or 0), float(p99 or 0))
    result.checks += [
        ("cronfleet: calls succeeded", f"{succeeded}/{calls}", succeeded == calls),
        ("cronfleet: one run per call", f"{jobs}", jobs == calls),
        ("cronfleet: one attempt per run", f"{most_attempts}", most_attempts == 1),
    ]
    return result


def report(out, opts: Options, rounds: list[list[Result]]) -> bool:
    out(
        f"bench tasks: {opts.jobs} calls of a no-op task; {opts.workers} worker(s) x -c {opts.concurrency} "
        f"-P {opts.pool}; PostgreSQL {settings.DATABASES['default']['NAME']!r}; {os.cpu_count()} CPUs; "
        "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    out(
        f"  {'':<32}{'calls':>7}{'enqueue s':>11}{'enqueued/s':>12}{'to finish s':>13}{'finished/s':>12}"
        f"{'start lag p50/p99 s':>21}{'statements/enqueue':>20}"
    )
    for number, results in enumerate(rounds, 1):
        if len(rounds) > 1:
            out(f"  round {number} of {len(rounds)}")
        for r in results:
            lag = "-" if r.lag is None else "/".join(f"{x:.2f}" for x in r.lag)
            out(
                f"  {r.label:<32}{r.calls:>7}{num(r.enqueue_seconds, 2):>11}{num(rate(r.calls, r.enqueue_seconds), 0):>12}"
                f"{num(r.seconds, 2):>13}{num(rate(r.calls, r.seconds), 0):>12}{lag:>21}{num(r.statements, 1):>20}"
            )
    shares = [
        rate(results[1].calls, results[1].seconds) / rate(results[0].calls, results[0].seconds)  # type: ignore[operator]
        for results in rounds
        if len(results) == 2
        and rate(results[0].calls, results[0].seconds)
        and rate(results[1].calls, results[1].seconds)
    ]
    if shares:
        out(
            f"  cronfleet / floor: {statistics.median(shares):.0%} of the floor's calls finished per second"
            + (f" (median of {len(shares)} rounds)" if len(shares) > 1 else "")
        )
    checks = [check for results in rounds for r in results for check in r.checks]
    out("  checks")
    for label, shown, passed in checks:
        out(f"    {label:<48}{shown:>12}  {'ok' if passed else 'FAIL'}")
    return all(passed for _, _, passed in checks)


def rate(count: int, seconds: float | None) -> float | None:
    return count / seconds if seconds else None


def num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def run(command, opts: Options) -> bool:
    rounds = []
    for number in range(1, opts.repeat + 1):
        if opts.repeat > 1:
            command.note(f"round {number} of {opts.repeat}")
        results = [measure_floor(opts, command.note)] if opts.floor else []
        results.append(measure_cronfleet(opts, command.note, command.clean))
        rounds.append(results)
    return report(command.stdout.write, opts, rounds)
