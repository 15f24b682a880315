"""bench e2e: N one-off jobs due at one instant, real beats and workers, until every run has
finished; beside it, in the same command, the floor: a plain Celery app (floor.py) running
a task that does nothing over the same broker with the same worker settings, timed until
its queue has drained (no message waiting, none unacknowledged).

Printed: runs finished per second, start lag (started - scheduled) p50/p99/max, dispatch
lag (enqueued - scheduled) p99, the workers' CPU per run, the database statements one run
costs the worker (counted in this process over STATEMENT_SAMPLE runs through the same code
the worker runs), and Cronfleet's rate as a share of the floor's.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bench import floor
from bench.common import Children, tree_cpu
from scheduler_app.http.secrets import encryption_keys
from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from scheduler_app.queues import redis_list_keys
from scheduler_app.services import wake_beats

QUEUE = "bench-e2e"
PREFIX = "bench-"
TENANTS = 10
SEED_CHUNK = 5000
STATEMENT_SAMPLE = 200
READY_TIMEOUT = 90.0
POLL_SECONDS = 0.25
UNFINISHED = (RunState.PENDING, RunState.QUEUED, RunState.RUNNING, RunState.RETRYING)
BATCHED_TIMEOUT_SECONDS = 10  # a batched job's timeout: a batch's time limit is the sum of its runs'


@dataclass
class Options:
    jobs: int
    workers: int
    concurrency: int
    pool: str
    beats: int
    batch_size: int
    timeout: float
    floor: bool = True
    batch: int = 0  # runs per message (Job.batch, CRONFLEET_RUN_BATCH_SIZE); 0: one run per message
    repeat: int = 1  # rounds, each the floor then Cronfleet: this machine's speed drifts within minutes


@dataclass
class Result:
    label: str
    runs: int = 0
    seconds: float | None = None
    worker_cpu: float = 0.0
    lag: tuple[float, float, float] | None = None  # start lag p50, p99, max
    dispatch_p99: float | None = None
    statements: float | None = None
    checks: list[tuple[str, str, bool]] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        return self.runs / self.seconds if self.seconds else None


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    # Beats and workers run the product as deployed: on the settings the bench's are built
    # on (bench/settings.py), without the bench app.
    env["DJANGO_SETTINGS_MODULE"] = settings.BENCH_BASE_SETTINGS
    env["PYTHONUNBUFFERED"] = "1"
    # Production-like workers: no debug cursor recording every statement.
    env["DJANGO_DEBUG"] = "false"
    env.setdefault("DJANGO_SECRET_KEY", "bench-only-" + uuid.uuid4().hex)
    # Whatever secret key each child has, it reads and writes tenants' webhook secrets with
    # this process's keys: the bench seeds the tenants and checks the signatures it receives.
    env.setdefault("CRONFLEET_ENCRYPTION_KEYS", ",".join(encryption_keys()))
    # A starting beat's time-data check (services/impact.py) reads the jobs the bench seeded,
    # whose next fires it set by hand rather than from their schedules: it would report each one
    # (an alert apiece) and spend the beats' CPU inside the measured window. `bench timedata`
    # measures that check on its own.
    env.setdefault("CRONFLEET_TIME_DATA_STARTUP_JOBS", "0")
    return env


def start_workers(children: Children, app: str, queue: str, opts, env: dict[str, str] | None = None) -> list[str]:
    return [start_worker(children, app, queue, number, opts, env) for number in range(opts.workers)]


def start_worker(children: Children, app: str, queue: str, number: int, opts, env: dict[str, str] | None = None) -> str:
    """Worker `number` (the child f"{app}-worker{number}") with opts' -c and -P, in `env`
    (default: child_env()); its node name."""
    name = f"bench{number}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    children.start(
        f"{app}-worker{number}",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "-Q",
            queue,
            "-c",
            str(opts.concurrency),
            "-P",
            opts.pool,
            "-n",
            name,
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "-l",
            "warning",
        ],
        env or child_env(),
    )
    return name


def beat_argv(batch_size: int | None = None) -> list[str]:
    argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), "runbeat"]
    return argv + ["--batch-size", str(batch_size)] if batch_size else argv


def wait_ready(control_app, names: list[str], children: Children) -> None:
    """Until every worker answers a remote-control ping (it consumes its queue by then)."""
    deadline = time.monotonic() + READY_TIMEOUT
    waiting = set(names)
    while waiting:
        for reply in control_app.control.ping(destination=sorted(waiting), timeout=0.5) or []:
            waiting -= set(reply)
        if time.monotonic() > deadline or any(proc.poll() is not None for _, proc in children.procs):
            logs = "\n".join(children.log(name)[-2000:] for name, _ in children.procs)
            raise RuntimeError(f"bench: workers {sorted(waiting)} did not become ready:\n{logs}")


def measure_floor(opts: Options, note) -> Result:
    def publish() -> None:
        with floor.app.producer_or_acquire() as producer, producer.batch(max_size=1000):
            for number in range(opts.jobs):
                floor.noop.apply_async(args=[number], queue=floor.QUEUE, producer=producer)

    done, _, elapsed, cpu = drain_floor(opts, note, f"publishing {opts.jobs} no-op messages", publish)
    result = Result("plain Celery no-op (floor)", runs=done, seconds=elapsed, worker_cpu=cpu, statements=0)
    result.checks.append(("floor: all messages run", f"{done}/{opts.jobs}", done == opts.jobs))
    return result


def drain_floor(opts, note, what: str, publish) -> tuple[int, float, float, float]:
    """The plain Celery floor: its workers started and ready, `publish()` sends opts.jobs
    no-op messages, then wait until its queue has drained (messages_left). Returns (messages
    run, seconds publishing, seconds to drained, the workers' CPU seconds)."""
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(*floor.UNACKED, *redis_list_keys(floor.QUEUE))
    children = Children()
    try:
        names = start_workers(children, "bench.floor", floor.QUEUE, opts)
        wait_ready(floor.app, names, children)
        note(f"floor: {opts.workers} worker(s) ready; {what}")
        cpu_before, started = children.cpu(), time.monotonic()
        publish()
        published = time.monotonic() - started
        deadline = started + opts.timeout
        while (left := messages_left(client)) and time.monotonic() < deadline:
            time.sleep(0.02)
        return opts.jobs - left, published, time.monotonic() - started, children.cpu() - cpu_before
    finally:
        children.stop_all()
        client.delete(*floor.UNACKED, *redis_list_keys(floor.QUEUE))
        client.close()


def messages_left(client) -> int:
    """The floor's messages still waiting in its queue or delivered and not acknowledged
    (one pipelined round trip: the bench's broker database holds no other worker's)."""
    with client.pipeline(transaction=False) as pipe:
        for key in redis_list_keys(floor.QUEUE):
            pipe.llen(key)
        pipe.hlen(floor.UNACKED[0])
        return sum(pipe.execute())


def seed(jobs: int, queue: str, **fields) -> list[int]:
    tenants = Tenant.objects.bulk_create(
        Tenant(slug=f"{PREFIX}{uuid.uuid4().hex[:8]}-{i}", name=f"Bench tenant {i}") for i in range(TENANTS)
    )
    ids = [tenant.id for tenant in tenants]
    far = db_now() + timedelta(days=365 * 100)
    for start in range(0, jobs, SEED_CHUNK):
        Job.objects.bulk_create(
            [
                Job(
                    tenant_id=ids[i % TENANTS],
                    name=f"e2e-{i}",
                    task_name="scheduler_app.echo",
                    queue=queue,
                    run_at=far,
                    next_run_at=far,
                    **fields,
                )
                for i in range(start, min(start + SEED_CHUNK, jobs))
            ]
        )
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
        cursor.execute(f"VACUUM ANALYZE {JobRun._meta.db_table}")
    return ids


def statements_per_run() -> float:
    """Database statements the worker's path costs one successful run, counted here over
    STATEMENT_SAMPLE queued runs through execution.execute_run (what the Celery task calls)."""
    from scheduler_app.worker import execution, transitions

    tenant_ids = seed(1, "bench-statements")
    job = Job.objects.get(tenant_id__in=tenant_ids)
    now = db_now()
    runs = JobRun.objects.bulk_create(
        JobRun(
            job=job,
            tenant_id=job.tenant_id,
            scheduled_at=now - timedelta(seconds=i),
            state=RunState.QUEUED,
            created_at=now,
            enqueued_at=now,
            dispatched_at=now,
        )
        for i in range(STATEMENT_SAMPLE)
    )
    execution.execute_run(runs[0].id, 1, worker="bench")  # warm: imports, the task registry
    sent_before = next(transitions.STATEMENTS)
    with CaptureQueriesContext(connection) as captured:
        for run in runs[1:]:
            outcome = execution.execute_run(run.id, 1, worker="bench")
            assert outcome.state == RunState.SUCCEEDED, outcome
    # Django's cursors (captured) and the prepared ones transitions.execute() sends.
    prepared = next(transitions.STATEMENTS) - sent_before - 1
    return (len(captured.captured_queries) + prepared) / (len(runs) - 1)


def measure_cronfleet(opts: Options, note, clean) -> Result:
    import redis

    from project.celery import app as project_app

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(*redis_list_keys(QUEUE))
    result = Result("cronfleet (beat + workers + ledger)")
    result.statements = statements_per_run()
    clean()
    tenant_ids = seed(
        opts.jobs, QUEUE, **({"batch": True, "timeout_seconds": BATCHED_TIMEOUT_SECONDS} if opts.batch else {})
    )
    note(f"cronfleet: seeded {opts.jobs} one-off jobs; {result.statements:.2f} statements per run")
    children = Children()
    try:
        names = start_workers(children, "project", QUEUE, opts)
        wait_ready(project_app, names, children)
        for number in range(opts.beats):
            env = {**child_env(), "CRONFLEET_RUN_BATCH_SIZE": str(opts.batch or 1)}
            children.start(f"beat{number}", beat_argv(opts.batch_size), env)
        deadline = time.monotonic() + READY_TIMEOUT
        while not all("runbeat: started" in children.log(f"beat{n}") for n in range(opts.beats)):
            if time.monotonic() > deadline:
                raise RuntimeError("bench: the beats did not start:\n" + children.log("beat0")[-2000:])
            time.sleep(0.05)
        note(f"cronfleet: {opts.workers} worker(s) and {opts.beats} beat(s) ready; the spike")
        cpu_before = children.cpu()
        workers_cpu_before = sum(tree_cpu(proc.pid) for name, proc in children.procs if "worker" in name)
        # The spike: every job's one-off instant is now (a real fire time, so no misfire policy
        # applies), and the NOTIFY wakes the beats as a job edit does.
        with transaction.atomic():
            spike = db_now()
            Job.objects.filter(tenant_id__in=tenant_ids).update(run_at=spike, next_run_at=spike)
            wake_beats()
        started = time.monotonic()
        finished = 0
        while time.monotonic() < started + opts.timeout:
            if not work_left(tenant_ids):
                finished = JobRun.objects.filter(tenant_id__in=tenant_ids, finished_at__isnull=False).count()
                if finished >= opts.jobs:
                    break
            time.sleep(POLL_SECONDS)
        result.worker_cpu = (
            sum(tree_cpu(proc.pid) for name, proc in children.procs if "worker" in name) - workers_cpu_before
        )
        note(f"cronfleet: {finished} runs finished; all processes used {children.cpu() - cpu_before:.1f} CPU s")
    finally:
        children.stop_all()
        client.delete(*redis_list_keys(QUEUE))
        client.close()
    return ledger_figures(result, tenant_ids, spike, opts.jobs)


def work_left(tenant_ids: list[int], unfinished=UNFINISHED) -> bool:
    """Whether a job of the spike is still due or a run of it still waits or runs: two
    EXISTS probes, each stopping at its first row (the runs' one on an index of active runs
    only). Counting the finished runs at every poll read them all: 30-120 ms of PostgreSQL
    four times a second, taken from the cores the beat and the workers share, where the
    floor's poll is a Redis GET."""
    return (
        Job.objects.filter(tenant_id__in=tenant_ids, enabled=True, next_run_at__isnull=False).exists()
        or JobRun.objects.filter(tenant_id__in=tenant_ids, state__in=unfinished).exists()
    )


def ledger_figures(result: Result, tenant_ids: list[int], spike: datetime, jobs: int) -> Result:
    run = JobRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT count(*) FILTER (WHERE state = 'succeeded'),
                   count(DISTINCT (job_id, scheduled_at)),
                   coalesce(sum(duplicate_deliveries), 0),
                   coalesce(max(jsonb_array_length(attempts)), 0),
                   extract(epoch FROM max(finished_at) - %(spike)s),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - scheduled_at)),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - scheduled_at)),
                   max(extract(epoch FROM started_at - scheduled_at)),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM enqueued_at - scheduled_at))
              FROM {run} WHERE tenant_id = ANY(%(tenants)s)
        """,
            {"spike": spike, "tenants": tenant_ids},
        )
        succeeded, distinct, duplicates, most_attempts, seconds, p50, p99, worst, dispatch_p99 = cursor.fetchone()
    result.runs, result.seconds = succeeded, float(seconds) if seconds else None
    result.lag = (float(p50 or 0), float(p99 or 0), float(worst or 0))
    result.dispatch_p99 = float(dispatch_p99 or 0)
    result.checks += [
        ("cronfleet: runs succeeded == N", f"{succeeded}/{jobs}", succeeded == jobs),
        ("cronfleet: one run per fire", f"{distinct}", distinct == jobs),
        ("cronfleet: one attempt per run", f"{most_attempts}", most_attempts == 1),
        ("cronfleet: duplicate deliveries (counted, not run)", f"{duplicates}", True),
    ]
    return result


def report(out, opts: Options, rounds: list[list[Result]]) -> bool:
    """The table, a block of rows per round; with several rounds, each round's share of the
    floor and the medians (a round's floor and Cronfleet ran within a minute of each other)."""
    db = settings.DATABASES["default"]
    batching = f"batches of {opts.batch}" if opts.batch else "one run per message"
    out(
        f"bench e2e: {opts.jobs} runs due at one instant, {batching}; {opts.workers} worker(s) x -c {opts.concurrency} "
        f"-P {opts.pool}; {opts.beats} beat(s); PostgreSQL {db['NAME']!r}; {os.cpu_count()} CPUs; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    out(
        f"  {'':<38}{'runs':>7}{'seconds':>9}{'runs/s':>9}{'start lag p50/p99/max s':>26}"
        f"{'dispatch p99 s':>16}{'worker CPU ms/run':>19}{'statements/run':>16}"
    )
    for number, results in enumerate(rounds, 1):
        if len(rounds) > 1:
            out(f"  round {number} of {len(rounds)}")
        for r in results:
            lag = "-" if r.lag is None else "/".join(f"{x:.2f}" for x in r.lag)
            out(
                f"  {r.label:<38}{r.runs:>7}{_num(r.seconds, 2):>9}{_num(r.rate, 0):>9}{lag:>26}"
                f"{_num(r.dispatch_p99, 2):>16}{_num(r.worker_cpu / r.runs * 1000 if r.runs else None, 2):>19}"
                f"{_num(r.statements, 2):>16}"
            )
    shares = [
        results[1].rate / results[0].rate
        for results in rounds
        if len(results) == 2 and results[0].rate and results[1].rate
    ]
    if len(rounds) > 1:
        for label in dict.fromkeys(r.label for results in rounds for r in results):
            rates = [r.rate for results in rounds for r in results if r.label == label and r.rate]
            if rates:
                out(
                    f"  median runs/s, {label:<38}{statistics.median(rates):>9.0f}  "
                    f"(rounds: {', '.join(f'{rate:.0f}' for rate in rates)})"
                )
    if len(shares) == 1:
        out(f"  cronfleet / floor: {shares[0]:.0%} of the floor's runs per second")
    elif shares:
        out(
            f"  cronfleet / floor: {statistics.median(shares):.0%} of the floor's runs per second, the median of "
            f"{len(shares)} rounds ({', '.join(f'{share:.0%}' for share in shares)})"
        )
    checks = [
        (f"round {number}: {label}" if len(rounds) > 1 else label, shown, passed)
        for number, results in enumerate(rounds, 1)
        for r in results
        for label, shown, passed in r.checks
    ]
    out("  checks")
    for label, shown, passed in checks:
        out(f"    {label:<48}{shown:>12}  {'ok' if passed else 'FAIL'}")
    return all(passed for _, _, passed in checks)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def run(command, opts: Options) -> bool:
    note = command.note
    rounds = []
    for number in range(1, opts.repeat + 1):
        if opts.repeat > 1:
            note(f"round {number} of {opts.repeat}")
        results = [measure_floor(opts, note)] if opts.floor else []
        results.append(measure_cronfleet(opts, note, command.clean))
        rounds.append(results)
    return report(command.stdout.write, opts, rounds)
