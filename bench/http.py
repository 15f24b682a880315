"""bench http: N one-off HTTP jobs due at one instant, each POSTing a signed webhook to a
local receiver (bench/receiver.py) that answers after --latency seconds; one beat
(`manage.py runbeat`) and one worker started as the README starts it (`celery -A project
worker`, no other flag), until every run has ended. Beside it, in the same command and
against the same receiver, two floors (bench/httpfloor.py), each with as many requests in
flight as the worker may hold (its processes x CRONFLEET_HTTP_IN_FLIGHT): an asyncio client
on the loop's bare streams (hand-written HTTP/1.1, keep-alive: the limit), and an aiohttp
client (an HTTP library's cost included).

Printed: webhooks delivered per second (the ledger's runs over the last end minus the
spike) and as a share of each floor's; start lag p50/p99/max in the ledger (started -
scheduled) and at the receiver (arrival - scheduled); signatures verified at the receiver;
database transactions per run (every process's, from pg_stat_database); the worker's peak
RSS per process and the most PostgreSQL connections its processes held at once.

With --hang, a second Cronfleet run where the last of the --hosts hosts answers only after
the jobs' deadline: the other hosts' p99 arrival lag beside the run without it.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from bench.common import Children, num, status_kb, tree_cpu, tree_pids
from bench.e2e import child_env, wait_ready, work_left
from scheduler_app.conf import app_settings
from scheduler_app.http.signing import InvalidSignature, verify
from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from scheduler_app.queues import redis_list_keys
from scheduler_app.services import tenant_signing_secrets, wake_beats

PREFIX = "bench-"
TENANTS = 10
SEED_CHUNK = 5000
READY_TIMEOUT = 90.0
POLL_SECONDS = 0.25
# How often the worker's PostgreSQL connections are counted: each count reads every socket
# the worker's processes hold (their attempts' connections too), and at every poll that
# took a share of a core from the processes measured. The database threads hold theirs
# for the whole run, so a count every few seconds sees them.
SOCKETS_SECONDS = 2.0
JOB_TIMEOUT = 10  # seconds: each webhook's whole-attempt deadline
UNFINISHED = (RunState.PENDING, RunState.QUEUED, RunState.RUNNING)  # a hanging host's retries are done with


@dataclass
class Options:
    jobs: int
    latency: float
    hosts: int
    in_flight: int | None  # CRONFLEET_HTTP_IN_FLIGHT for the worker (None: the default)
    hang: bool
    timeout: float
    floor: bool = True


@dataclass
class Result:
    label: str
    runs: int = 0
    seconds: float | None = None
    lag: tuple[float, float, float] | None = None  # ledger start lag p50, p99, max
    arrival: tuple[float, float, float] | None = None  # receiver arrival lag p50, p99, max
    others_p99: float | None = None  # arrival p99 of the hosts that do not hang
    transactions: float | None = None
    rss_mib: float | None = None
    connections: int | None = None
    worker_cpu: float | None = None
    checks: list[tuple[str, str, bool]] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        return self.runs / self.seconds if self.seconds else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_receiver(children: Children, name: str, port: int, opts: Options, hang: bool) -> Path:
    out = children.folder / f"{name}.jsonl"
    children.start(
        name,
        [
            sys.executable,
            "-m",
            "bench.receiver",
            "--port",
            str(port),
            "--hosts",
            str(opts.hosts),
            "--latency",
            str(opts.latency),
            "--hang-seconds",
            str(JOB_TIMEOUT + 5 if hang else 0),
            "--out",
            str(out),
        ],
        child_env(),
    )
    deadline = time.monotonic() + READY_TIMEOUT
    while "receiver: ready" not in children.log(name):
        if time.monotonic() > deadline or children.dead():
            raise RuntimeError("bench: the receiver did not start:\n" + children.log(name)[-2000:])
        time.sleep(0.05)
    return out


def worker_processes(opts: Options) -> int:
    return os.cpu_count() or 1  # Celery's default concurrency, what `celery -A project worker` starts


def in_flight(opts: Options) -> int:
    return opts.in_flight if opts.in_flight is not None else app_settings.HTTP_IN_FLIGHT


FLOORS = {"streams": "bare-stream asyncio client", "aiohttp": "aiohttp client"}


def measure_floor(opts: Options, note, client: str) -> Result:
    children = Children()
    port = free_port()
    try:
        start_receiver(children, "floor-receiver", port, opts, hang=False)
        k = worker_processes(opts) * in_flight(opts)
        note(f"floor: {FLOORS[client]}, {opts.jobs} POSTs, {k} in flight")
        cpu_before = children.cpu()
        proc = children.start(
            "floor-client",
            [
                sys.executable,
                "-m",
                "bench.httpfloor",
                "--client",
                client,
                "--requests",
                str(opts.jobs),
                "--in-flight",
                str(k),
                "--port",
                str(port),
                "--hosts",
                str(opts.hosts),
            ],
            child_env(),
        )
        proc.wait(timeout=opts.timeout)
        figures = json.loads(children.log("floor-client").strip().splitlines()[-1])
        result = Result(
            f"{FLOORS[client]}, {k} in flight (floor)",
            runs=figures["requests"] - figures["failed"],
            seconds=figures["seconds"],
            worker_cpu=children.cpu() - cpu_before,
        )
        result.checks.append(
            (f"floor, {client}: every POST answered 200", f"{figures['failed']} failed", figures["failed"] == 0)
        )
        return result
    finally:
        children.stop_all()


def seed(opts: Options, port: int) -> list[int]:
    tenants = Tenant.objects.bulk_create(
        Tenant(slug=f"{PREFIX}{uuid.uuid4().hex[:8]}-{i}", name=f"Bench tenant {i}") for i in range(TENANTS)
    )
    ids = [tenant.id for tenant in tenants]
    far = db_now().replace(year=db_now().year + 100)
    for start in range(0, opts.jobs, SEED_CHUNK):
        Job.objects.bulk_create(
            [
                Job(
                    tenant_id=ids[i % TENANTS],
                    name=f"hook-{i}",
                    target_kind="http",
                    timeout_seconds=JOB_TIMEOUT,
                    target_config={
                        "method": "POST",
                        "url": f"http://127.0.0.{i % opts.hosts + 1}:{port}/hook/{i}",
                        "headers": {},
                        "body": json.dumps({"job": i}),
                    },
                    run_at=far,
                    next_run_at=far,
                )
                for i in range(start, min(start + SEED_CHUNK, opts.jobs))
            ]
        )
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
        cursor.execute(f"VACUUM ANALYZE {JobRun._meta.db_table}")
    return ids


def committed() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def postgres_sockets(pids: list[int]) -> int:
    """TCP connections to PostgreSQL's port that these processes hold (from /proc)."""
    port = f":{int(settings.DATABASES['default'].get('PORT') or 5432):04X}"
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/net/{name}") as table:
                for line in list(table)[1:]:
                    fields = line.split()
                    if fields[2].endswith(port) and fields[3] == "01":  # remote port, ESTABLISHED
                        inodes.add(fields[9])
        except OSError:
            continue
    held = 0
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                held += target.startswith("socket:[") and target[8:-1] in inodes
        except OSError:
            continue
    return held


def measure_cronfleet(opts: Options, note, clean, *, hang: bool) -> Result:
    import redis

    from project.celery import app as project_app

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue = app_settings.QUEUE
    client.delete(*redis_list_keys(queue))
    clean()
    children = Children()
    port = free_port()
    label = "cronfleet, one host hanging" if hang else "cronfleet (beat + worker + ledger)"
    result = Result(label)
    try:
        received = start_receiver(children, "receiver", port, opts, hang)
        tenant_ids = seed(opts, port)
        env = {**child_env(), "CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8"}
        if opts.in_flight is not None:
            env["CRONFLEET_HTTP_IN_FLIGHT"] = str(opts.in_flight)
        worker = children.start("worker", [sys.executable, "-m", "celery", "-A", "project", "worker"], env)
        wait_ready(project_app, [f"celery@{socket.gethostname()}"], children)  # the default node name
        deadline = time.monotonic() + READY_TIMEOUT
        children.start("beat", [sys.executable, str(settings.BASE_DIR / "manage.py"), "runbeat"], env)
        while "runbeat: started" not in children.log("beat"):
            if time.monotonic() > deadline:
                raise RuntimeError("bench: the beat did not start:\n" + children.log("beat")[-2000:])
            time.sleep(0.05)
        note(f"{label}: {opts.jobs} HTTP jobs, worker and beat ready; the spike")
        commits, cpu_before = committed(), tree_cpu(worker.pid)
        with transaction.atomic():
            spike = db_now()
            Job.objects.filter(tenant_id__in=tenant_ids).update(run_at=spike, next_run_at=spike)
            wake_beats()
        started, most_connections, counted = time.monotonic(), 0, 0.0
        while time.monotonic() < started + opts.timeout:
            if time.monotonic() >= counted + SOCKETS_SECONDS:
                most_connections = max(most_connections, postgres_sockets(tree_pids(worker.pid)))
                counted = time.monotonic()
            if not work_left(tenant_ids, UNFINISHED):
                break
            time.sleep(POLL_SECONDS)
        result.worker_cpu = tree_cpu(worker.pid) - cpu_before
        result.rss_mib = max(status_kb(pid, "VmHWM") or 0 for pid in tree_pids(worker.pid)) / 1024
        result.connections = most_connections
        result.transactions = (committed() - commits) / opts.jobs
    finally:
        children.stop_all()
        client.delete(*redis_list_keys(queue))
        client.close()
    return ledger_figures(result, tenant_ids, spike, opts, received, hang)


def ledger_figures(result: Result, tenant_ids: list[int], spike, opts: Options, received: Path, hang: bool) -> Result:
    runs = list(
        JobRun.objects.filter(tenant_id__in=tenant_ids).values_list(
            "job_id", "tenant_id", "scheduled_at", "started_at", "finished_at", "state"
        )
    )
    done = [r for r in runs if r[5] == RunState.SUCCEEDED]
    expected = opts.jobs if not hang else opts.jobs - opts.jobs // opts.hosts  # the hanging host's time out
    result.runs = len(done)
    if done:
        result.seconds = (max(r[4] for r in done) - spike).total_seconds()
        result.lag = percentiles([(r[3] - r[2]).total_seconds() for r in runs if r[3]])
    # At the receiver: every request's arrival, and its signature checked with its tenant's secrets.
    now = db_now()
    secrets = {tenant.id: tenant_signing_secrets(tenant, now) for tenant in Tenant.objects.filter(id__in=tenant_ids)}
    tenant_of = {r[0]: r[1] for r in runs}
    scheduled = {r[0]: r[2].timestamp() for r in runs}
    arrivals, others, bad, ids = [], [], 0, set()
    hanging_host = f"127.0.0.{opts.hosts}"
    for line in received.read_text().splitlines():
        host, at, msg_id, stamp, signature, body = json.loads(line)
        ids.add(msg_id)
        job = int(msg_id.split("@")[0].removeprefix("job")) if msg_id and msg_id.startswith("job") else None
        headers = {"webhook-id": msg_id, "webhook-timestamp": stamp, "webhook-signature": signature}
        try:
            verify(secrets[tenant_of[job]], headers, body.encode(), now=int(at))
        except (InvalidSignature, KeyError, ValueError):
            bad += 1
        lag = at - scheduled.get(job, spike.timestamp())
        arrivals.append(lag)
        if host != hanging_host or not hang:
            others.append(lag)
    result.arrival = percentiles(arrivals) if arrivals else None
    result.others_p99 = percentiles(others)[1] if others else None
    result.checks += [
        (f"{result.label}: runs succeeded", f"{len(done)}/{expected}", len(done) >= expected),
        (f"{result.label}: one run per job", f"{len(runs)}", len(runs) == opts.jobs),
        (f"{result.label}: signatures verified at the receiver", f"{bad} bad", bad == 0 and bool(arrivals)),
        (f"{result.label}: distinct webhook-ids received", f"{len(ids)}", len(ids) >= expected),
    ]
    return result


def percentiles(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    if not values:
        return (0.0, 0.0, 0.0)
    return (statistics.median(values), values[min(len(values) - 1, int(len(values) * 0.99))], values[-1])


def report(out, opts: Options, results: list[Result]) -> bool:
    db = settings.DATABASES["default"]
    out(
        f"bench http: {opts.jobs} webhooks due at one instant, receiver latency {opts.latency:g} s, {opts.hosts} "
        f"host(s); 1 beat, 1 worker (`celery -A project worker`: {worker_processes(opts)} processes x "
        f"{in_flight(opts)} in flight); PostgreSQL {db['NAME']!r}; {os.cpu_count()} CPUs; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    out(
        f"  {'':<52}{'runs':>7}{'seconds':>9}{'runs/s':>9}{'start lag p50/p99/max s':>26}"
        f"{'arrival p50/p99/max s':>24}{'xacts/run':>11}{'RSS MiB':>9}{'PG conns':>10}{'CPU ms/run':>12}"
    )
    for r in results:
        out(
            f"  {r.label:<52}{r.runs:>7}{num(r.seconds, 2):>9}{num(r.rate, 0):>9}{_triple(r.lag):>26}"
            f"{_triple(r.arrival):>24}{num(r.transactions, 2):>11}{num(r.rss_mib, 0):>9}"
            f"{num(r.connections, 0):>10}{num(r.worker_cpu / r.runs * 1000 if r.runs and r.worker_cpu else None, 2):>12}"
        )
    ours = next((r for r in results if r.label.startswith("cronfleet (")), None)
    for floor in (r for r in results if "floor" in r.label):
        if ours and floor.rate and ours.rate:
            name = floor.label.split(",")[0]
            out(f"  cronfleet / {name}: {ours.rate / floor.rate:.2f} of its webhooks per second")
    hung = next((r for r in results if "hanging" in r.label), None)
    if hung and ours and ours.others_p99 and hung.others_p99 is not None:
        out(
            f"  the other hosts' arrival p99: {hung.others_p99:.2f} s with one host hanging, "
            f"{ours.others_p99:.2f} s without ({hung.others_p99 / ours.others_p99:.1f}x)"
        )
    out("  checks")
    checks = [check for r in results for check in r.checks]
    for label, shown, passed in checks:
        out(f"    {label:<60}{shown:>14}  {'ok' if passed else 'FAIL'}")
    return all(passed for _, _, passed in checks)


def _triple(values) -> str:
    return "-" if values is None else "/".join(f"{x:.2f}" for x in values)


def run(command, opts: Options) -> bool:
    results = [measure_floor(opts, command.note, client) for client in FLOORS] if opts.floor else []
    results.append(measure_cronfleet(opts, command.note, command.clean, hang=False))
    if opts.hang:
        results.append(measure_cronfleet(opts, command.note, command.clean, hang=True))
    return report(command.stdout.write, opts, results)
