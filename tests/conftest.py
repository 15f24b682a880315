"""Fixtures shared by the suite: tenants and jobs, and real beat/worker processes.

Processes started here talk to the same PostgreSQL test database and Redis broker as the
test itself, so tests that use them must be transactional (data committed).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from celery import current_app as celery_app
from django.conf import settings
from django.db import connection
from kombu import Connection

from scheduler_app.models import Job, JobRun, RunState, Tenant
from scheduler_app.queues import redis_list_keys
from scheduler_app.redisclient import client_from_url

# The helpers in tests/support/ assert too: pytest rewrites their asserts as it does the tests'
# (before any test module imports them).
pytest.register_assert_rewrite("tests.support")

ROOT = Path(__file__).resolve().parent.parent
# RabbitMQ, for the tests that run a beat and a worker on it (test.sh checks it answers).
AMQP_URL = os.environ.get("CRONFLEET_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
NOW = datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)
_names = itertools.count()


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def wait_for(predicate: Callable[[], object], *, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# --- the tiers' markers -------------------------------------------------------------------------
# Every test of tests/system/ and tests/faults/ starts processes: they are `slow` (so that
# -m "not slow" is the unit and integration tiers), whether or not their module says so.
_SLOW_TIERS = ("system", "faults")


def pytest_collection_modifyitems(config, items) -> None:
    tests = Path(__file__).resolve().parent
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in _SLOW_TIERS and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


# --- in CI, a skipped test is a failed run ----------------------------------------------------
# CI=true (.ci/run sets it) means every tool and server the suite uses is installed: a test
# that skips there skips because something is missing, and the run fails, naming each one.
_SKIPPED: list[str] = []


def pytest_runtest_logreport(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus) -> None:
    if _SKIPPED and os.environ.get("CI") == "true" and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter) -> None:
    if _SKIPPED and os.environ.get("CI") == "true":
        terminalreporter.section("skipped under CI=true (a failure: install what they need)", red=True)
        for line in _SKIPPED:
            terminalreporter.line(line)


@pytest.fixture(scope="session", autouse=True)
def no_database_session_left_behind(django_db_setup, django_db_blocker):
    """At the end, name every other session still connected to the test database (a process
    or a thread some test did not stop): it would keep the database from being dropped. A
    worker's daemon threads close theirs once idle (the HTTP flight's within half a second),
    so the sessions get a few seconds to go."""
    yield
    if (
        connection.vendor != "postgresql"
        or connection.settings_dict["NAME"] != settings.DATABASES["default"]["TEST"]["NAME"]
    ):
        return  # no test database was made: the run's tests needed none

    def others():
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, application_name, state, backend_start, left(query, 200)"
                " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return cursor.fetchall()

    try:
        wait_for(lambda: not others(), timeout=5, interval=0.2, what="the other sessions to leave")
    except AssertionError:
        left = others()
    else:
        left = []
    if left:
        warnings.warn("sessions left connected to the test database: " + "; ".join(map(repr, left)), stacklevel=1)


@pytest.fixture(autouse=True)
def fresh_claim_state():
    """Each test claims afresh: the beat's list of queues to watch starts empty, and so does
    its memory of the tenants' fair order."""
    from scheduler_app import dispatch

    dispatch.backpressure.forget_backpressure()
    dispatch.claim.forget_fair_order()
    yield
    dispatch.backpressure.forget_backpressure()
    dispatch.claim.forget_fair_order()


@pytest.fixture(autouse=True)
def fresh_rate_limit_breaker(monkeypatch):
    """Each test starts with the API rate limits' breaker closed: it is one per process, and a
    test that tripped it would otherwise turn every later request's rate limiting off. So do
    the process's memories of addresses over their limits (API keys, ping keys)."""
    from scheduler_app.api import throttling

    monkeypatch.setattr(throttling, "counter", throttling.Counter())
    for limit in (throttling.failed_auth, throttling.unknown_pings):
        monkeypatch.setattr(limit, "refused", throttling.RefusedAddresses())


@pytest.fixture
def tenant(db) -> Tenant:
    return Tenant.objects.create(slug=f"t{next(_names)}", name="Test tenant")


@pytest.fixture
def make_job(tenant) -> Callable[..., Job]:
    """Factory fixture: make_job(every_seconds=5, next_run_at=...). Deterministic defaults."""

    def make(**fields) -> Job:
        fields.setdefault("name", f"job-{next(_names)}")
        fields.setdefault("tenant", tenant)
        fields.setdefault("task_name", "scheduler_app.echo")
        if not any(fields.get(k) for k in ("cron", "every_seconds", "run_at")):
            fields["cron"] = "* * * * *"
        if fields.get("every_seconds") and not fields.get("anchor_at"):
            fields["anchor_at"] = utc(2024, 1, 1)
        fields.setdefault("next_run_at", utc(2024, 1, 1))
        return Job.objects.create(**fields)

    return make


@pytest.fixture
def make_run(make_job):
    """Factory fixture: make_run(job=None, state=..., attempt=...): a queued run by default."""

    def make(job=None, **fields) -> JobRun:
        job = job or make_job()
        fields.setdefault("scheduled_at", utc(2024, 1, 1))
        fields.setdefault("state", RunState.QUEUED)
        return JobRun.objects.create(job=job, tenant=job.tenant, created_at=NOW, **fields)

    return make


def environment_with(**env: str | None) -> dict[str, str]:
    """This process's environment with the project's settings and `env` over it (None unsets)."""
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings"}
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return environment


def process_env(**extra: str) -> dict[str, str]:
    """The environment for a beat or worker process pointed at this test's database."""
    db = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def reset_pools() -> None:
    """Make this process's Celery app take its connection and producer pools again on next
    use, for the broker it is now given (kombu keeps each broker's pools, so switching back
    finds the earlier ones)."""
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture
def rabbitmq_queue(queue_name):
    """A RabbitMQ queue name of this test's own, deleted afterwards (RabbitMQ must answer)."""
    with Connection(AMQP_URL, connect_timeout=5) as conn:
        conn.ensure_connection(max_retries=1)  # a clear error here, not a timeout later
    yield queue_name
    with Connection(AMQP_URL) as conn:
        conn.default_channel.queue_delete(queue_name)


def take_broker_messages(queue: str) -> list[dict]:
    """Remove and return the messages waiting in Redis queue `queue`, each decoded to
    {"headers", "properties", "args"}, in the order a worker would take them (priority
    list by priority list, oldest first in each), with the queue's bindings deleted too."""
    client = client_from_url(settings.CELERY_BROKER_URL, socket_timeout=10, socket_connect_timeout=5)
    try:
        keys = redis_list_keys(queue)
        with client.pipeline() as pipe:
            for key in keys:
                pipe.lrange(key, 0, -1)
            pipe.delete(*keys, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
            *lists, _ = pipe.execute()
    finally:
        client.close()
    messages = []
    for raw in (raw for listed in lists for raw in reversed(listed)):  # LPUSH'd: the oldest is last
        envelope = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        messages.append({"headers": envelope["headers"], "properties": envelope["properties"], "args": args})
    return messages


def _kill_what_outlived(proc: subprocess.Popen) -> None:
    """SIGKILL whatever is left of a stopped process's group (a pool process its parent left
    behind), so no process of a test outlives it holding a session on the test database."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class Processes:
    """Starts real beat and worker processes and stops them all at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self, name: str, argv: list[str], **env: str) -> subprocess.Popen:
        log = self.tmp_path / f"{name}.log"
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].rsplit("::", 1)[-1]
        env.setdefault("PGAPPNAME", f"{name} of {test}"[:63])  # names a session left behind
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=process_env(**env),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((name, proc, log))
        return proc

    def beat(self, name: str = "beat", *args: str, prefix: tuple[str, ...] = (), **env: str) -> subprocess.Popen:
        return self.start(name, [*prefix, sys.executable, "manage.py", "runbeat", *args], **env)

    def worker(
        self,
        queue: str,
        name: str = "worker",
        concurrency: int = 2,
        include: str = "",
        prefix: tuple[str, ...] = (),
        wait: bool = True,
        **env: str,
    ) -> subprocess.Popen:
        """A Celery worker on `queue`, ready when this returns (wait=False: started, and the
        caller waits for "ready." in its log, e.g. for several starting side by side)."""
        argv = [
            *prefix,
            sys.executable,
            "-m",
            "celery",
            "-A",
            "project",
            "worker",
            "-Q",
            queue,
            "-c",
            str(concurrency),
            "-n",
            f"{name}-{uuid.uuid4().hex[:6]}@%h",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "-l",
            "info",
            *(["--include", include] if include else []),
        ]
        proc = self.start(name, argv, **env)
        if wait:
            wait_for(lambda: "ready." in self.log(name) or proc.poll() is not None, timeout=60, what=f"{name} ready")
            assert proc.poll() is None, self.log(name)
        return proc

    def log(self, name: str) -> str:
        for proc_name, _, log in reversed(self.procs):  # the latest process of that name
            if proc_name == name:
                return log.read_text(errors="replace")
        raise KeyError(name)

    def stop(self, proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        _kill_what_outlived(proc)
        return proc.returncode

    def stop_all(self, timeout: float = 30) -> None:
        self.stop_together([proc for _, proc, _ in self.procs], timeout=timeout)

    def stop_together(self, procs: list[subprocess.Popen], timeout: float = 30) -> None:
        """SIGTERM to every process group at once, then one shared wait: a process that takes
        its time to stop does not hold up the others' stops. SIGKILL for what outlives it."""
        running = [proc for proc in procs if proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for proc in procs:
            _kill_what_outlived(proc)


@pytest.fixture
def processes(tmp_path):
    procs = Processes(tmp_path)
    yield procs
    procs.stop_all()


@pytest.fixture
def private_database(transactional_db):
    """This test's database ("cronfleet") on a PostgreSQL cluster of its own, migrated, for a
    test that restarts its server: the test process and the processes it starts use it (take
    it before `cluster`, so the tenant that fixture makes is in it too). Skipped without
    PostgreSQL's server programs (tests/support/servers)."""
    from tests.support import servers  # here: servers imports this module's wait_for

    if servers.postgres_bindir() is None:
        pytest.skip("needs PostgreSQL's initdb, pg_ctl and postgres (CRONFLEET_TEST_PG_BINDIR or pg_config)")
    with servers.private_postgres() as server:
        server.create_database("cronfleet")
        with servers.database_on(server.host, server.port, "cronfleet"):
            yield server


@pytest.fixture
def queue_name() -> str:
    """A broker queue of this test's own, so leftover messages never leak between tests."""
    return f"test-{uuid.uuid4().hex[:10]}"


def rows_read(statement: str, params: dict, table: str, *, also: tuple[str, ...] = ()) -> tuple[int, str]:
    """How many rows `statement` reads from `table` (EXPLAIN ANALYZE, after an ANALYZE of the
    table and of the tables `also` names, which the plan joins it to, so that no statistics
    left by an earlier test choose the plan; summed over the plan's nodes and their loops),
    and the plan's start for messages."""
    from django.db import connection

    with connection.cursor() as cursor:
        for name in (table, *also):
            cursor.execute(f"ANALYZE {name}")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def read(node) -> int:
        here = node.get("Actual Rows", 0) * node.get("Actual Loops", 1) if node.get("Relation Name") == table else 0
        return here + sum(read(child) for child in node.get("Plans", []))

    return read(plan[0]["Plan"]), json.dumps(plan)[:3000]
