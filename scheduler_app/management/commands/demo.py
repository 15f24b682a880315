"""A local demo: seed a tenant and a few jobs, run web + beat + worker, watch runs finish.

    ./demo.sh                  # or: export DJANGO_DEBUG=true; ./manage.py migrate && ./manage.py demo
    ./manage.py demo --port 8001
    ./manage.py demo --no-web

Everything runs on this machine: with no DATABASE_URL / CELERY_BROKER_URL the settings use
an SQLite file and kombu's filesystem broker under CRONFLEET_VAR_DIR (default var/).
Ctrl-C stops every process this command started.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.db.migrations.executor import MigrationExecutor

from scheduler_app import alerts
from scheduler_app.conf import app_settings
from scheduler_app.models import AlertRule, Job, JobRun, RunState, Tenant, db_now
from scheduler_app.services import InvalidInput, JobSpec, job_create, tenant_create

TENANT_SLUG = "demo"
DEMO_JOBS = [
    JobSpec(
        name="heartbeat",
        task_name="scheduler_app.echo",
        every=5,
        kwargs={"greeting": "hello from cronfleet"},
        description="Demo: succeeds every 5 seconds.",
    ),
    JobSpec(
        name="flaky",
        task_name="scheduler_app.fail",
        every=20,
        kwargs={"message": "flaky always fails"},
        max_attempts=3,
        retry_backoff_seconds=2,
        description="Demo: always fails; shows two retries (after ~2 s and ~4 s) and a dead run.",
    ),
    JobSpec(
        name="minutely",
        task_name="scheduler_app.echo",
        cron="* * * * *",
        timezone="Europe/Berlin",
        args=["tick"],
        description="Demo: a cron job at the start of every minute, Berlin time.",
    ),
]
# The demo's alert rule: on every failed or dead run of "flaky", with no channel (the alerts are
# listed in the admin, the dashboard and `alerts list`, and sent nowhere).
DEMO_ALERT_JOB = "flaky"
DEMO_ALERT_RULE = {"on_failure": True}
# Harmless lines hidden from the children's output: kombu warns this for every
# connection to a filesystem:// broker URL (which has no host by design).
KNOWN_NOISE = ("No hostname was supplied. Reverting to default 'localhost'",)
POLL_SECONDS = 0.5
STOP_GRACE_SECONDS = 10.0  # how long children get to stop after SIGTERM before SIGKILL
RESULT_WIDTH = 70
# Runs whose finished_at is set but whose state already moved on: the beat requeued a
# retrying run (state queued/running, attempt + 1) before this poll saw its failure.
REQUEUED_STATES = {RunState.QUEUED.value, RunState.RUNNING.value}


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen | None = None
    reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


def ping_base_for(port: int, no_web: bool, environ) -> str | None:
    """The address check-in URLs start with in the demo: its web server's, unless the
    environment names one (None: leave the setting as it is)."""
    if no_web or environ.get("CRONFLEET_PING_BASE_URL"):
        return None
    return f"http://127.0.0.1:{port}"


class Command(BaseCommand):
    help = (
        "Seed a demo tenant and jobs, run the web server, a beat and a worker, and print "
        "each run as it finishes. Ctrl-C stops everything. For local use only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port", type=int, default=8000, help="Port of the web server on 127.0.0.1 (default %(default)s)"
        )
        parser.add_argument("--no-web", action="store_true", help="Do not start the web server")

    # --- entry ----------------------------------------------------------------------------

    def handle(self, *args, port: int, no_web: bool, **options) -> None:
        if not 1 <= port <= 65535:
            raise CommandError("--port must be between 1 and 65535")
        self.stopping = threading.Event()
        self.signals = 0
        self.signal_name = ""
        self.output_lock = threading.Lock()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.on_signal)
        self.check_migrated()
        self.describe_backends()
        if base := ping_base_for(port, no_web, os.environ):
            # The web, beat and worker it starts read it (project/settings.py): the job pages'
            # and the API's check-in URLs name the demo's own address.
            os.environ["CRONFLEET_PING_BASE_URL"] = base
            self.say(
                f"demo: check-in URLs start with {base} "
                f"(CRONFLEET_PING_BASE_URL; export it in other shells for `jobs add --monitor`)"
            )
        self.seed()
        if not no_web:
            self.check_port_free(port)
            self.ensure_superuser(port)
        self.children = self.make_children(port, no_web)
        self.child_env = self.make_child_env()
        code = 0
        try:
            for child in self.children:
                if self.stopping.is_set():
                    break
                self.start(child)
            if not self.stopping.is_set():
                self.say("demo: everything is up; runs are printed as they finish. Ctrl-C stops the demo.")
                width = len(_hms(db_now()))
                self.say(
                    f"{'finished':{width}}  {'job':10} {'scheduled':{width}}  {'state':9} {'try':>3}  result / error"
                )
                code = self.watch()
        finally:
            if self.signal_name:
                self.say(f"demo: {self.signal_name}: stopping everything (send it again to force)")
            self.stop_children()
        if code:
            raise SystemExit(code)
        self.say("demo: stopped")

    # --- preparation ----------------------------------------------------------------------

    def check_migrated(self) -> None:
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError(
                "the database has unapplied migrations: run `./manage.py migrate` first (./demo.sh does this for you)"
            )

    def describe_backends(self) -> None:
        db = settings.DATABASES[DEFAULT_DB_ALIAS]
        broker = settings.CELERY_BROKER_URL
        where = db["NAME"] if db["ENGINE"].endswith("sqlite3") else f"{db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"
        if broker.startswith("filesystem://"):
            broker = f"filesystem ({settings.BROKER_DIR})"
        else:
            broker = broker.split("://", 1)[0] + "://..."
        self.say(f"demo: database {where}")
        self.say(f"demo: broker   {broker}")

    def seed(self) -> None:
        tenant = Tenant.objects.filter(slug=TENANT_SLUG).first()
        if tenant is None:
            try:
                tenant = tenant_create(slug=TENANT_SLUG, name="Demo", actor="demo")
            except InvalidInput:  # created by another process in between
                tenant = Tenant.objects.get(slug=TENANT_SLUG)
        for spec in DEMO_JOBS:
            job = Job.objects.filter(tenant=tenant, name=spec.name).first()
            made = "exists "
            if job is None:
                try:
                    job = job_create(tenant, spec, actor="demo")
                    made = "created"
                except InvalidInput as exc:
                    if exc.field != "name":
                        raise CommandError(f"cannot create demo job {spec.name!r}: {exc}") from None
                    job = Job.objects.get(tenant=tenant, name=spec.name)
            state = "" if job.enabled else "  (paused)"
            self.say(
                f"demo: job {made} {tenant.slug}/{job.name:10} {job.schedule.describe():32} -> {job.task_name}{state}"
            )
        self.seed_alert_rule(tenant)

    def seed_alert_rule(self, tenant: Tenant) -> None:
        """Give demo/flaky an alert rule on failure, unless it has a rule already (kept as is)."""
        job = Job.objects.get(tenant=tenant, name=DEMO_ALERT_JOB)
        if AlertRule.objects.filter(job=job).exists():
            return
        alerts.rule_set(job, DEMO_ALERT_RULE, actor="demo")
        self.say(f"demo: alert rule on {tenant.slug}/{job.name}: on failure, no channel (listed in the admin)")

    def ensure_superuser(self, port: int) -> None:
        User = get_user_model()
        url = f"http://127.0.0.1:{port}/admin/"
        if not User.objects.filter(is_superuser=True).exists():
            if User.objects.filter(username="admin").exists():
                self.say(
                    f"demo: a user 'admin' exists but no superuser; create one with "
                    f"`./manage.py createsuperuser` to use {url}"
                )
                return
            User.objects.create_superuser("admin", "", "admin")
            self.say(f"demo: created superuser admin / password admin for {url}")
        else:
            admin = User.objects.filter(username="admin", is_superuser=True).first()
            if admin is None or not admin.check_password("admin"):
                self.say(f"demo: admin at {url} (log in with your existing superuser)")
                return
            self.say(f"demo: admin at {url} (user admin / password admin)")
        self.say(
            "demo: WARNING: admin/admin is for local use only; never expose this server "
            "or reuse this database anywhere else"
        )

    def check_port_free(self, port: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                raise CommandError(
                    f"port {port} on 127.0.0.1 is not free ({exc.strerror}); choose another with --port"
                ) from None

    def make_children(self, port: int, no_web: bool) -> list[Child]:
        manage = str(settings.BASE_DIR / "manage.py")
        py = sys.executable
        children = []
        if not no_web:
            children.append(Child("web", [py, manage, "runserver", f"127.0.0.1:{port}", "--noreload"]))
        # --max-sleep 1: SQLite has no NOTIFY, so a short nap lets retries go out on time.
        children.append(Child("beat", [py, manage, "runbeat", "--max-sleep", "1"]))
        # Two prefork processes: they share the SQLite file through WAL and its busy timeout;
        # prefork (unlike the solo pool) enforces the jobs' time limits.
        children.append(
            Child(
                "worker",
                [
                    py,
                    "-m",
                    "celery",
                    "-A",
                    "project",
                    "--quiet",
                    "worker",
                    "-Q",
                    app_settings.QUEUE,
                    "-l",
                    "warning",
                    "--concurrency",
                    "2",
                    "--hostname",
                    "demo-worker@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
            )
        )
        return children

    def make_child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = os.environ.get("DJANGO_SETTINGS_MODULE", "project.settings")
        env["PYTHONUNBUFFERED"] = "1"  # their output is piped through this process, line by line
        env.setdefault("CRONFLEET_LOG_LEVEL", "WARNING")  # the run lines below say it all
        return env

    # --- children -------------------------------------------------------------------------

    def start(self, child: Child) -> None:
        # Each child leads its own process group: a terminal's Ctrl-C reaches only this
        # command, which stops the children in order; killpg also reaches their children.
        child.process = subprocess.Popen(
            child.argv,
            cwd=settings.BASE_DIR,
            env=self.child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        child.reader = threading.Thread(target=self.relay, args=(child,), daemon=True)
        child.reader.start()
        shown = " ".join(["python" if a == sys.executable else a for a in child.argv])
        self.say(f"demo: started {child.name:6} (pid {child.pid}): {shown}")

    def relay(self, child: Child) -> None:
        """Copy a child's output to ours, each line prefixed with the child's name."""
        assert child.process is not None and child.process.stdout is not None
        for raw in iter(child.process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            if line and not any(noise in line for noise in KNOWN_NOISE):
                self.say(f"  [{child.name}] {line}")
        child.process.stdout.close()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        # No output here: the main thread may be holding the output lock.
        self.signals += 1
        self.signal_name = self.signal_name or signal.Signals(signum).name
        self.stopping.set()

    def stop_children(self) -> None:
        started = [c for c in self.children if c.process is not None]
        for child in started:
            assert child.process is not None  # started
            if child.process.poll() is None:
                # The child only: a Celery worker stops its own pool processes (warm shutdown).
                child.process.terminate()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in started:
            assert child.process is not None  # started
            while child.process.poll() is None and time.monotonic() < deadline and self.signals < 2:
                time.sleep(0.05)
            if child.process.poll() is None:
                why = "stop forced" if self.signals >= 2 else f"did not stop within {STOP_GRACE_SECONDS:.0f}s"
                self.say(f"demo: {child.name} (pid {child.pid}): {why}; killing it")
                self._signal_group(child, signal.SIGKILL)
                child.process.wait(timeout=5)
        for child in started:
            # Whatever is left in the child's group (a pool process orphaned by its parent).
            self._signal_group(child, signal.SIGKILL)
            if child.reader is not None:
                child.reader.join(timeout=2)

    @staticmethod
    def _signal_group(child: Child, signum: int) -> None:
        try:
            os.killpg(child.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    # --- the watch loop -------------------------------------------------------------------

    def watch(self) -> int:
        """Print runs as they finish until a signal (0) or a child's unexpected exit (1)."""
        # A run's finished_at moves forward with each attempt that ends, so (id, finished_at)
        # names one ending; `seen` holds the ids already printed at exactly `since`.
        since = db_now()
        seen: set[int] = set()
        while not self.stopping.is_set():
            for child in self.children:
                assert child.process is not None  # handle() watches once every child started
                code = child.process.poll()
                if code is not None:
                    how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
                    self.say(f"demo: {child.name} (pid {child.pid}) {how} unexpectedly; stopping the others")
                    return 1
            try:
                runs = list(
                    JobRun.objects.filter(finished_at__gte=since)
                    .select_related("job")
                    .order_by("finished_at", "id")
                    .only(
                        "id",
                        "job__name",
                        "scheduled_at",
                        "state",
                        "attempt",
                        "finished_at",
                        "next_attempt_at",
                        "result",
                        "error",
                        "reason",
                    )
                )
            except OperationalError as exc:  # e.g. SQLite busy beyond its timeout: try again
                self.say(f"demo: could not read the run ledger ({exc}); retrying")
                runs = []
            for run in runs:
                if run.finished_at == since and run.id in seen:
                    continue
                if run.finished_at > since:
                    since, seen = run.finished_at, set()
                seen.add(run.id)
                self.say(self.run_line(run))
            self.stopping.wait(POLL_SECONDS)
        return 0

    def run_line(self, run: JobRun) -> str:
        state, attempt = str(run.state), run.attempt
        if state in REQUEUED_STATES:
            state, attempt = RunState.RETRYING.value, attempt - 1
        detail = " ".join((run.error or run.result or run.reason).split())
        if len(detail) > RESULT_WIDTH:
            detail = detail[: RESULT_WIDTH - 3] + "..."
        if run.state == RunState.RETRYING and run.next_attempt_at is not None:
            detail += f" (next try {_hms(run.next_attempt_at)})"
        return f"{_hms(run.finished_at)}  {run.job.name:10} {_hms(run.scheduled_at)}  {state:9} {attempt:>3}  {detail}"

    def say(self, line: str) -> None:
        """Write one line; never raise (a closed terminal must not stop the clean-up)."""
        with self.output_lock:
            try:
                self.stdout.write(line)
                self.stdout.flush()
            except (OSError, ValueError):
                pass


def _hms(moment: datetime) -> str:
    """HH:MM:SS and the zone's abbreviation, in settings.TIME_ZONE (the zone Django gives this
    process; UTC unless changed)."""
    local = moment.astimezone(ZoneInfo(settings.TIME_ZONE))
    return f"{local:%H:%M:%S} {local.tzname() or local.strftime('%z')}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
