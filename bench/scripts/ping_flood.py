#!/usr/bin/env python3
"""Measure what a flood of check-in pings costs: the ledger, the broker's Redis, and another
tenant's start lag. Tenant "flood" has one monitored (check-in) job whose schedule fires once
a year, so no fire is open and each ping that gets through finds none; tenant "quiet" has
--quiet-jobs echo jobs firing every --quiet-every seconds; one web server (the tree's
gunicorn), one beat and one worker.

    CELERY_BROKER_URL=redis://127.0.0.1:6379/4 .venv/bin/python bench/scripts/ping_flood.py
    .venv/bin/python bench/scripts/ping_flood.py --root <old checkout> --database cronfleet_pingflood_old

Makes a fresh database of its own on DATABASE_URL's server (dropped and created), migrates
it, starts `gunicorn -c project/gunicorn.conf.py` on a free local port, `manage.py runbeat`
and a Celery worker (two processes, on a queue of its own) from --root, with the tree's
default settings. The broker (default redis://127.0.0.1:6379/4) is also the rate limits'
Redis; its db should be this script's alone, since its keys are counted. Then, one after the
other:

- baseline: --seconds of quiet's fires with no pings;
- (a) --spellings spellings of flood's ping key that uuid.UUID reads as the key (upper case,
  braces, urn:uuid:, hyphens moved or left out), each pinged once;
- (b) --seconds of POSTs with a --body bytes body from --threads threads: the first thread
  at the key as its URL spells it, the others each time at a new spelling;
- (c) --junk pings at unknown keys of --junk-size characters.

Each phase's requests come from a local address of its own (127.0.0.x; in (b) one a thread),
so that what one phase leaves in a per-address limit does not answer the next one.
Printed: the answers by status ("200 not recorded" apart), flood's runs recorded, the
jobrun table's size (pg_total_relation_size) and rows, the Redis keys added (new key names in
the broker's db, with their MEMORY USAGE, besides DBSIZE and INFO's used_memory, which is
the whole server's), and quiet's start lag (started_at - scheduled_at) p50 / p99 / max for
fires due during (b) against those due during the baseline. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import socket
import statistics
import string
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import floodsetup  # beside this script (bench/scripts/)

QUIET_QUEUE = f"pingflood-{uuid.uuid4().hex[:8]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    floodsetup.add_arguments(parser, "cronfleet_pingflood")
    parser.add_argument("--seconds", type=int, default=60, help="the baseline's and the flood's length")
    parser.add_argument("--spellings", type=int, default=300, help="(a): spellings of the key, each pinged once")
    parser.add_argument("--threads", type=int, default=4, help="(b) and (c): client threads")
    parser.add_argument("--body", type=int, default=10_000, help="(b): bytes of each ping's body")
    parser.add_argument("--junk", type=int, default=3_000, help="(c): pings at unknown keys")
    parser.add_argument("--junk-size", type=int, default=3_900, help="(c): characters of each unknown key")
    parser.add_argument("--quiet-jobs", type=int, default=3)
    parser.add_argument("--quiet-every", type=int, default=2, help="seconds between a quiet job's fires")
    parser.add_argument("--drain", type=int, default=120, help="longest wait for quiet's fires to start")
    args = parser.parse_args()

    os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/4")
    root = floodsetup.set_up(args, script="ping-flood")
    port = free_port()
    procs = start_processes(root, port)
    try:
        flood(args, root, port)
    finally:
        for proc in procs:
            floodsetup.stop(proc)
        drop_queue(QUIET_QUEUE)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_processes(root: Path, port: int) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CRONFLEET_WEB_BIND": f"127.0.0.1:{port}"}
    logs = Path("/tmp") / f"ping_flood-{QUIET_QUEUE}"
    logs.mkdir(exist_ok=True)
    web = [sys.executable, "-m", "gunicorn", "-c", "project/gunicorn.conf.py"]
    worker = [sys.executable, "-m", "celery", "-A", "project", "worker", "-Q", QUIET_QUEUE, "-c", "2"]
    worker += [
        "-n",
        f"{QUIET_QUEUE}@%h",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
        "-l",
        "warning",
    ]
    beat = [sys.executable, "manage.py", "runbeat", "--max-sleep", "1"]
    procs = floodsetup.start(root, env, logs, {"web": web, "worker": worker, "beat": beat})
    print(f"logs in {logs}", flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if Client(port, "127.0.0.1").send("GET", "/healthz")[0] == "200":
            break
        time.sleep(0.5)
    else:
        raise SystemExit(f"the web server did not answer /healthz in 60 s: see {logs / 'web.log'}")
    time.sleep(5)  # the worker's and the beat's start
    return procs


class Client:
    """One keep-alive connection to the web server from a local address of its own."""

    def __init__(self, port: int, source: str):
        self.port, self.source, self.conn = port, source, None

    def send(self, method: str, path: str, body: bytes = b"") -> tuple[str, bytes]:
        """The answer's status (an exception's name when there was none) and its body."""
        for attempt in range(2):
            reused = self.conn is not None
            if self.conn is None:
                self.conn = http.client.HTTPConnection(
                    "127.0.0.1", self.port, timeout=60, source_address=(self.source, 0)
                )
            try:
                headers = {"Content-Type": "text/plain"} if body else {}
                self.conn.request(method, path, body=body or None, headers=headers)
                response = self.conn.getresponse()
                text = response.read()
                if response.will_close:
                    self.close()
                return str(response.status), text
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if attempt or not reused:  # a kept connection the server had closed: once more
                    return type(exc).__name__, b""
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def answer(status: str, text: bytes) -> str:
    return "200 not recorded" if status == "200" and text.startswith(b"not recorded") else status


def spellings(key: str, rng: random.Random):
    """Endless spellings of `key` other than its own that uuid.UUID reads as it: the plain ones
    first, then random case, hyphens at random places and a random wrapper, each of these new
    even in lower case (a limit counted on the text lowercased counts each apart)."""
    canonical, digits = uuid.UUID(key), key.replace("-", "")
    plain = [key.upper(), "{" + key + "}", "urn:uuid:" + key, digits, digits.upper(), "uuid:" + key]
    seen = {key, *(spelling.lower() for spelling in plain)}
    yield from plain
    while True:
        text = "".join(c.upper() if rng.random() < 0.5 else c for c in digits)
        for at in sorted(rng.sample(range(1, 32), rng.randint(0, 8)), reverse=True):
            text = text[:at] + "-" + text[at:]
        spelling = rng.choice(["{}", "{{{}}}", "urn:uuid:{}", "uuid:{}", "urn:uuid:{{{}}}"]).format(text)
        if spelling.lower() not in seen and uuid.UUID(spelling) == canonical:
            seen.add(spelling.lower())
            yield spelling


def ping_path(spelling: str) -> str:
    return "/ping/" + quote(spelling, safe=":")


class Redis:
    def __init__(self, url: str):
        import redis

        self.client = redis.Redis.from_url(url)

    def names(self) -> set[bytes]:
        return set(self.client.scan_iter(count=1000))

    def state(self) -> tuple[set[bytes], int, int]:
        return self.names(), self.client.dbsize(), self.client.info("memory")["used_memory"]

    def usage(self, names: set[bytes]) -> int:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.memory_usage(name)
        return sum(size or 0 for size in pipe.execute())

    def added(self, before: tuple[set[bytes], int, int]) -> str:
        after = self.state()
        new = after[0] - before[0]
        return (
            f"Redis keys added {len(new):,} ({self.usage(new) / 1e6:.3f} MB by MEMORY USAGE), "
            f"DBSIZE {before[1]:,} -> {after[1]:,}; the server's used_memory {(after[2] - before[2]) / 1e6:+.2f} MB"
        )


def ledger_size() -> int:
    from django.db import connection

    from scheduler_app.models import JobRun

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [JobRun._meta.db_table])
        return cursor.fetchone()[0]


def in_threads(count: int, work) -> list[Counter]:
    """work(i) in `count` threads, each returning a Counter of answers; their counters."""
    results: list[Counter] = [Counter() for _ in range(count)]

    def run(i: int) -> None:
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def codes(counts: Counter) -> str:
    return ", ".join(f"{status} x {n:,}" for status, n in sorted(counts.items())) or "none"


def lags_of(runs) -> str:
    started = [run for run in runs if run.started_at is not None]
    lags = sorted((run.started_at - run.scheduled_at).total_seconds() for run in started)
    if not lags:
        return f"none of {len(runs)} fires started"
    p99 = lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))]
    return (
        f"{len(started)} of {len(runs)} fires started; start lag p50 {statistics.median(lags):.2f} s, "
        f"p99 {p99:.2f} s, max {lags[-1]:.2f} s"
    )


def flood(args, root: Path, port: int) -> None:
    from django.conf import settings

    from scheduler_app import services
    from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now

    redis = Redis(settings.CELERY_BROKER_URL)
    flooder = services.tenant_create(slug="flood", name="flood")
    spec = services.JobSpec(name="nightly", target_kind="monitor", monitor={"grace_seconds": 300}, cron="0 0 1 1 *")
    job = services.job_create(flooder, spec)
    key = str(job.monitor.ping_key)
    flood_runs = JobRun.objects.filter(job=job)
    quiet = Tenant.objects.create(slug="quiet", name="quiet")
    start = db_now().replace(microsecond=0) + timedelta(seconds=2)
    quiet_jobs = [
        Job.objects.create(
            tenant=quiet,
            name=f"every-{args.quiet_every}s-{i}",
            every_seconds=args.quiet_every,
            anchor_at=start,
            next_run_at=start,
            task_name="scheduler_app.echo",
            queue=QUIET_QUEUE,
        )
        for i in range(args.quiet_jobs)
    ]
    quiet_runs = JobRun.objects.filter(job__in=quiet_jobs)
    rng = random.Random(40)
    lines = [f"code: {root} ({commit_of(root)}), web: gunicorn -c project/gunicorn.conf.py, the tree's defaults"]

    # Baseline: quiet's fires alone.
    time.sleep(2)
    before = redis.state()
    base_from = db_now()
    time.sleep(args.seconds)
    base_to = db_now()
    lines.append(f"baseline ({args.seconds} s, no pings): {redis.added(before)}")

    # (a) Each spelling once.
    names = spellings(key, rng)
    variants = [next(names) for _ in range(args.spellings)]
    runs_before, before = flood_runs.count(), redis.state()
    began = time.monotonic()
    share = [variants[i :: args.threads] for i in range(args.threads)]
    client_a = [Client(port, "127.0.0.2") for _ in range(args.threads)]

    def spell(i: int) -> Counter:
        return Counter(answer(*client_a[i].send("GET", ping_path(v))) for v in share[i])

    answers = sum(in_threads(args.threads, spell), Counter())
    took = time.monotonic() - began
    lines.append(
        f"(a) {args.spellings} spellings once each in {took:.1f} s: {codes(answers)}; "
        f"flood's runs recorded +{flood_runs.count() - runs_before:,}; {redis.added(before)}"
    )

    # (b) The sustained flood.
    body = "".join(rng.choices(string.ascii_letters + string.digits + " \n", k=args.body)).encode()
    runs_before, rows_before, size_before, before = (
        flood_runs.count(),
        JobRun.objects.count(),
        ledger_size(),
        redis.state(),
    )
    flood_from = db_now()
    deadline = time.monotonic() + args.seconds
    lock = threading.Lock()

    def flood_thread(i: int) -> Counter:
        client, counts = Client(port, f"127.0.0.{10 + i}"), Counter()
        while time.monotonic() < deadline:
            if i == 0:
                spelling = key
            else:
                with lock:
                    spelling = next(names)
            counts[answer(*client.send("POST", ping_path(spelling), body))] += 1
        client.close()
        return counts

    per_thread = in_threads(args.threads, flood_thread)
    flood_to = db_now()
    answers = sum(per_thread, Counter())
    rows_after, size_after = JobRun.objects.count(), ledger_size()
    sent = sum(answers.values())
    lines.append(
        f"(b) {args.seconds} s flood, {args.threads} threads, {args.body:,}-byte bodies: {sent:,} pings "
        f"({sent / args.seconds:.0f}/s); at the key: {codes(per_thread[0])}; at other spellings: "
        f"{codes(sum(per_thread[1:], Counter()))}"
    )
    lines.append(
        f"    flood's runs recorded +{flood_runs.count() - runs_before:,}; ledger (jobrun) "
        f"{size_before / 1e6:.2f} -> {size_after / 1e6:.2f} MB ({(size_after - size_before) / 1e6:+.2f} MB), "
        f"rows {rows_before:,} -> {rows_after:,}; {redis.added(before)}"
    )

    # (c) Unknown junk keys.
    alphabet = string.ascii_lowercase + string.digits
    junk = ["".join(rng.choices(alphabet, k=args.junk_size)) for _ in range(args.junk)]
    share = [junk[i :: args.threads] for i in range(args.threads)]
    client_c = [Client(port, "127.0.0.3") for _ in range(args.threads)]
    before, began = redis.state(), time.monotonic()

    def junk_thread(i: int) -> Counter:
        return Counter(answer(*client_c[i].send("GET", ping_path(k))) for k in share[i])

    answers = sum(in_threads(args.threads, junk_thread), Counter())
    took = time.monotonic() - began
    lines.append(
        f"(c) {args.junk:,} unknown keys of {args.junk_size:,} characters in {took:.1f} s: {codes(answers)}; "
        f"{redis.added(before)}"
    )

    # (d) Quiet's start lag: fires due during the flood against the baseline's.
    end = time.monotonic() + args.drain
    waiting = quiet_runs.filter(scheduled_at__lt=flood_to, state__in=[RunState.PENDING, RunState.QUEUED])
    while time.monotonic() < end and waiting.exists():
        time.sleep(1)
    base = list(quiet_runs.filter(scheduled_at__gte=base_from, scheduled_at__lt=base_to))
    during = list(quiet_runs.filter(scheduled_at__gte=flood_from, scheduled_at__lt=flood_to))
    lines.append(f"(d) quiet, baseline: {lags_of(base)}")
    lines.append(f"    quiet, during (b): {lags_of(during)}")
    lines.append(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    print("\n".join(lines), flush=True)


def commit_of(root: Path) -> str:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "not a git checkout"


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
