#!/usr/bin/env python3
"""Benchmark the documented way of serving: gunicorn with the production settings against PostgreSQL.

    .venv/bin/python bench/scripts/bench_serving.py
    .venv/bin/python bench/scripts/bench_serving.py --requests 700 --clients 50 --workers 2 --threads 4
    .venv/bin/python bench/scripts/bench_serving.py --through-proxy

Makes (or reuses) a database of its own, migrates it, makes a tenant with an API key, starts
gunicorn exactly as the Dockerfile does (project/gunicorn.conf.py, debug off), then fires two
bursts at GET /api/v1/me, each request on a connection of its own from --clients threads:
one with the valid key, one with well-formed fake keys (a new unknown prefix each time, all
from 127.0.0.1). While a burst runs, pg_stat_activity is sampled every 10 ms. For each burst
it prints the answers by status, the requests a second, the count of 5xx, the peak number of PostgreSQL connections
the server held, those still held after the burst, and p50/p99/max latency. Figures, not
assertions: nothing here passes or fails.

With --through-proxy the server is a named cell behind the routing proxy of a fleet of cells
(deploy/nginx, run by nginx as tests/support/nginx.py writes it), and the valid-key burst runs twice
in the same run, straight to gunicorn and through nginx, so the hop's cost is the difference.

Needs PostgreSQL and Redis (DATABASE_URL's server, --redis for the rate-limit counters;
its cronfleet:api-rate:* keys are deleted before each burst). Everything it starts listens
on 127.0.0.1 and stops when it ends.
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this is bench/scripts/)
DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/cronfleet_bench_serving"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE),
        help="PostgreSQL database to use (made if missing; default %(default)s)",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13"),
        help="Redis for the rate-limit counters (default %(default)s)",
    )
    parser.add_argument("--requests", type=int, default=700, help="Requests per burst (default %(default)s)")
    parser.add_argument("--clients", type=int, default=50, help="Client threads (default %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="Gunicorn processes (default %(default)s)")
    parser.add_argument("--threads", type=int, default=4, help="Threads per process (default %(default)s)")
    parser.add_argument(
        "--through-proxy",
        action="store_true",
        help="Also through the cells' routing proxy (nginx, deploy/nginx), side by side",
    )
    return parser.parse_args()


def ensure_database(url: str) -> None:
    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def manage(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        sys.exit(f"manage.py {argv[0]} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


MAKE_KEY = """
from scheduler_app import services
from scheduler_app.models import Tenant
tenant, _ = Tenant.objects.get_or_create(slug="bench-serving", defaults={"name": "Bench serving"})
Tenant.objects.filter(id=tenant.id).update(api_requests_per_minute=1_000_000)  # the burst is not rate-limited
print(services.apikey_create(tenant=tenant, name="bench-serving")[1])
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def request(port: int, key: str) -> tuple[int, float]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/api/v1/me", headers={"Host": "localhost", "Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        status = response.status
    except OSError:
        status = 0  # no answer at all
    finally:
        conn.close()
    return status, time.perf_counter() - started


class ConnectionSampler:
    """Samples the server's PostgreSQL connections (all but its own) until stopped."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def count(self) -> int:
        return self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.count())
            self.stop.wait(0.01)

    def __enter__(self) -> ConnectionSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def burst(name: str, port: int, keys, args: argparse.Namespace, database_url: str, rate: redis.Redis) -> None:
    for stale in rate.scan_iter("cronfleet:api-rate:*"):
        rate.delete(stale)
    with ConnectionSampler(database_url) as sampler:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            results = list(pool.map(lambda key: request(port, key), keys))
        elapsed = time.perf_counter() - started
        time.sleep(0.1)  # the last answers' connections go back to the pool
        held_after = sampler.count()
    statuses = Counter(status for status, _ in results)
    latencies = sorted(seconds * 1000 for _, seconds in results)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(f"{name}: {len(results)} requests from {args.clients} clients")
    answers = ", ".join(f"{count} x {status or 'no answer'}" for status, count in sorted(statuses.items()))
    print(f"  answers      {answers}")
    print(f"  5xx          {sum(count for status, count in statuses.items() if status >= 500)}")
    print(f"  PostgreSQL   peak {sampler.peak} connections held by the server, {held_after} after the burst")
    print(f"  throughput   {len(results) / elapsed:,.0f} requests/s")
    print(f"  latency ms   p50 {statistics.median(latencies):.1f}  p99 {p99:.1f}  max {latencies[-1]:.1f}")


def through_proxy(port: int, key: str, args: argparse.Namespace, rate: redis.Redis) -> None:
    """The valid-key burst through nginx in front of the server, as the cell `bench`."""
    sys.path.insert(0, str(ROOT))
    from tests.support import nginx  # the proxy as the routing test runs it

    if nginx.program() is None:
        sys.exit("--through-proxy needs nginx (Debian's nginx package)")
    proxy = free_port()
    with tempfile.TemporaryDirectory() as directory:
        nginx.write_conf(Path(directory), proxy, {"bench": port, "default": port})
        server = subprocess.Popen(nginx.argv(Path(directory)), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while request(proxy, key)[0] != 200:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"nginx did not start: {(Path(directory) / 'error.log').read_text()}")
                time.sleep(0.2)
            burst("valid key, through the routing proxy", proxy, [key] * args.requests, args, args.database_url, rate)
            burst("valid key, straight again", port, [key] * args.requests, args, args.database_url, rate)
        finally:
            server.terminate()
            server.wait(timeout=30)


def main() -> None:
    args = parse_args()
    ensure_database(args.database_url)
    env = dict(os.environ)
    env.pop("DJANGO_DEBUG", None)  # production: debug off
    port = free_port()
    if args.through_proxy:
        env["CRONFLEET_CELL"], env["CRONFLEET_TRUSTED_PROXIES"] = "bench", "1"
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=args.database_url,
        CELERY_BROKER_URL=args.redis,
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        CRONFLEET_WEB_BIND=f"127.0.0.1:{port}",
        CRONFLEET_WEB_WORKERS=str(args.workers),
        CRONFLEET_WEB_THREADS=str(args.threads),
        PYTHONUNBUFFERED="1",
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    key = manage(env, "shell", "-c", MAKE_KEY).strip().splitlines()[-1]
    rate = redis.Redis.from_url(args.redis)
    print(
        f"gunicorn: {args.workers} processes x {args.threads} threads "
        f"(at most {args.workers * args.threads} database connections)"
    )
    log = open(ROOT / "var" / "bench_serving.log", "wb") if (ROOT / "var").is_dir() else subprocess.DEVNULL
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "project/gunicorn.conf.py"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while request(port, key)[0] != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("gunicorn did not start (see var/bench_serving.log)")
            time.sleep(0.2)
        burst("valid key", port, [key] * args.requests, args, args.database_url, rate)
        if args.through_proxy:
            through_proxy(port, key, args, rate)
        fakes = [f"cf_{secrets.token_hex(6)}_{secrets.token_urlsafe(24)}" for _ in range(args.requests)]
        burst("fake keys", port, fakes, args, args.database_url, rate)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
