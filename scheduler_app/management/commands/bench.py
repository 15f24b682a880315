"""Load benchmarks against a real PostgreSQL and Redis.

    manage.py bench dispatch --jobs N --beats K [--batch-size B] [--timeout S] [--keep] [--yes]
    manage.py bench e2e --jobs N [--workers W] [--concurrency C] [--pool prefork|threads|solo]
                        [--beats K] [--batch B] [--no-floor] [--yes]
    manage.py bench ledger --jobs N [--rows R] [--load L] [--repeat X] [--beats K] [--yes]

`ledger` (scheduler_app/benchmarks/ledger.py) seeds R finished runs for N jobs and prints
the dispatch rate against an empty ledger's, the API's run list and stats latencies, the
plans of the hot statements, and how fast beats prune while L jobs fire every second.

`e2e` (scheduler_app/benchmarks/e2e.py) runs N one-off jobs due at one instant through real
beats and workers until every run finished, beside a plain Celery no-op app with the same
worker settings (the floor), and prints both.

`dispatch` seeds N cron jobs (tenants bench-0..bench-9, queue "bench"), starts K
`runbeat` processes, makes all N jobs due at one instant (the spike: one UPDATE setting
next_run_at to the database's now), and measures how long the beats take until the
ledger holds N queued runs and the Redis list of queue "bench" holds N messages. No
worker runs, so the beats run with backpressure off (CRONFLEET_QUEUE_HIGH_WATER=0).

It deletes data: every tenant whose slug starts with "bench-" (with its jobs, runs and
audit events), and the Redis list of queue "bench", before the run and after it (unless
--keep). So it runs only on PostgreSQL with a redis:// broker, and only when the
database name contains "bench" or --yes is given.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from scheduler_app.benchmarks import e2e, ledger
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Tenant, db_now
from scheduler_app.publish import redis_list_keys
from scheduler_app.services import WAKE_CHANNEL, wake_beats

PREFIX = "bench-"
TENANTS = 10
QUEUE = "bench"
TASK = "scheduler_app.echo"
CRON = "* * * * *"
SEED_CHUNK = 5000
# Seeded jobs wait here until the spike; far enough that no beat touches them.
FAR_FUTURE = datetime(2999, 1, 1, tzinfo=UTC)
POLL_SECONDS = 0.05
START_TIMEOUT = 120.0  # seconds a beat may take to print "runbeat: started"
LISTEN_TIMEOUT = 15.0  # seconds to wait for every beat's LISTEN connection
STOP_TIMEOUT = 60.0  # seconds a beat may take to exit after SIGTERM
STARTED_LINE = "runbeat: started"


def _status_kb(pid: int, field: str) -> int | None:
    """A memory field (VmRSS, VmHWM) of /proc/PID/status in kB; None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _cpu_by_command(name: str) -> dict[int, float]:
    """CPU seconds of every process of this machine whose command name is `name`, by pid."""
    found: dict[int, float] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        command = text[text.find("(") + 1:text.rfind(")")]
        if command == name:
            fields = text.rsplit(")", 1)[1].split()
            found[int(entry)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def _cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two _cpu_by_command samples (processes that exited in between are missed)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _machine_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot (/proc/stat)."""
    try:
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def _mib(kb: int | None) -> str:
    return "n/a" if kb is None else f"{kb / 1024:.1f}"


class Beat:
    """One `manage.py runbeat` child: its start-up time, memory and (from its log) work."""

    def __init__(self, number: int, argv: list[str], env: dict[str, str]) -> None:
        self.number = number
        self.spawned_at = time.monotonic()
        self.proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1,
        )
        self.started = threading.Event()
        self.startup_seconds: float | None = None
        self.rss_after_start_kb: int | None = None
        self.peak_rss_kb: int | None = None
        self.cpu_at_spike: float | None = None
        self.cpu_at_end: float | None = None
        self.published = 0
        self.turns = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=30)
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            line = line.rstrip("\n")
            self.tail.append(line)
            if STARTED_LINE in line and not self.started.is_set():
                self.startup_seconds = time.monotonic() - self.spawned_at
                self.started.set()
            elif "beat turn: claimed" in line:
                # "... published %s runs, ..." (logged at INFO after every turn with work)
                self.turns += 1
                try:
                    self.published += int(line.split("published ", 1)[1].split(" ", 1)[0])
                except (IndexError, ValueError):
                    pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then wait (SIGKILL if it will not stop); return the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.tail.append(f"bench: beat {self.number} ignored SIGTERM for {STOP_TIMEOUT:.0f}s; killed")
                self.proc.kill()
                self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        return self.proc.returncode


class Command(BaseCommand):
    help = ("Benchmark: N jobs due at one instant, K beats; seconds until all are recorded and "
            "published. Deletes bench-* tenants and the 'bench' Redis queue.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("scenario", choices=["dispatch", "e2e", "ledger"], help="What to measure")
        parser.add_argument("--jobs", type=int, required=True, help="Jobs due at the spike (N)")
        parser.add_argument("--beats", type=int, default=1, help="runbeat processes (K, default 1)")
        parser.add_argument("--batch-size", type=int, default=settings.CRONFLEET_BATCH_SIZE,
                            help="The beats' --batch-size (default %(default)s)")
        parser.add_argument("--timeout", type=float, default=300.0,
                            help="Seconds to wait for all runs after the spike (default %(default)s)")
        parser.add_argument("--workers", type=int, default=1, help="e2e: Celery worker processes (default 1)")
        parser.add_argument("--concurrency", type=int, default=2, help="e2e: each worker's -c (default 2)")
        parser.add_argument("--pool", choices=["prefork", "threads", "solo"], default="prefork",
                            help="e2e: each worker's -P (default prefork)")
        parser.add_argument("--no-floor", action="store_true", help="e2e: skip the plain-Celery floor")
        parser.add_argument("--batch", type=int, default=0, metavar="B",
                            help="e2e: batched jobs, B runs per message (default 0: one run per message)")
        parser.add_argument("--rows", type=int, default=10_000_000, help="ledger: finished runs to seed (default %(default)s)")
        parser.add_argument("--load", type=int, default=1667,
                            help="ledger: jobs firing every second while beats prune (default %(default)s: 100,000 a minute)")
        parser.add_argument("--repeat", type=int, default=3, help="ledger: spikes per ledger size, the median (default 3)")
        parser.add_argument("--keep", action="store_true",
                            help="Leave the bench rows and messages in place at the end")
        parser.add_argument("--yes", action="store_true",
                            help="Run even though the database name does not contain 'bench'")

    # --- entry -------------------------------------------------------------------------

    def handle(self, *args, scenario: str, jobs: int, beats: int, batch_size: int, timeout: float,
               keep: bool, yes: bool, workers: int, concurrency: int, pool: str, no_floor: bool, batch: int,
               rows: int = 0, load: int = 0, repeat: int = 1, **options) -> None:
        if jobs < 1 or beats < 1 or batch_size < 1 or timeout <= 0:
            raise CommandError("bench: --jobs, --beats and --batch-size must be at least 1, --timeout positive",
                               returncode=2)
        self.preflight(yes)
        import redis  # the broker is redis:// (checked above); redis-py comes with kombu's transport

        self.redis = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        try:
            self.redis.ping()
        except redis.RedisError as exc:
            raise CommandError(f"bench: cannot reach the broker {self.broker_label()}: {exc}", returncode=2) from None
        self.queue_keys = redis_list_keys(QUEUE)
        self.verbosity = options.get("verbosity", 1)

        self.clean()
        beats_list: list[Beat] = []
        # SIGTERM (and SIGINT, which a shell ignores in background jobs) must still stop the
        # beats and clean up: turn both into an exception that unwinds through `finally`.
        previous = {sig: signal.signal(sig, self.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if scenario == "e2e":
                ok = e2e.run(self, e2e.Options(jobs=jobs, workers=workers, concurrency=concurrency, pool=pool,
                                               beats=beats, batch_size=batch_size, timeout=timeout,
                                               floor=not no_floor, batch=batch))
            elif scenario == "ledger":
                ok = ledger.run(self, ledger.Options(jobs=jobs, rows=rows, beats=beats, batch_size=batch_size,
                                                     load=min(load, jobs), repeat=max(1, repeat), timeout=timeout))
            else:
                ok = self.dispatch_bench(jobs, beats, batch_size, timeout, beats_list)
        finally:
            for sig, handler in previous.items():  # a second signal during clean-up acts as usual
                signal.signal(sig, handler)
            for beat in beats_list:  # normally already stopped; this covers errors and signals
                if beat.alive():
                    beat.stop()
            if not keep:
                self.clean()
        if not ok:
            raise CommandError("bench: FAILED (see the checks above)", returncode=1)

    def on_signal(self, signum: int, frame) -> None:
        raise CommandError(f"bench: interrupted by {signal.Signals(signum).name}; stopping the beats", returncode=130)

    # --- safety --------------------------------------------------------------------------

    def broker_label(self) -> str:
        url = settings.CELERY_BROKER_URL
        if "@" in url:  # hide a password
            scheme, rest = url.split("://", 1)
            url = f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url

    def preflight(self, yes: bool) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(f"bench: needs PostgreSQL (DATABASE_URL=postgres://...), not {connection.vendor}",
                               returncode=2)
        if not str(settings.CELERY_BROKER_URL).startswith(("redis://", "rediss://")):
            raise CommandError(f"bench: needs a Redis broker (CELERY_BROKER_URL=redis://...), not "
                               f"{settings.CELERY_BROKER_URL.split('://', 1)[0]}://", returncode=2)
        name = str(settings.DATABASES["default"]["NAME"])
        if "bench" not in name and not yes:
            raise CommandError(f"bench: deletes '{PREFIX}*' tenants and flushes queue '{QUEUE}'; database "
                               f"{name!r} has no 'bench' in its name, pass --yes to run anyway", returncode=2)
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError(f"bench: database {name!r} has unapplied migrations; run manage.py migrate first",
                               returncode=2)
        # The beats fire every due job in the database, not only ours: refuse to fire real ones.
        others = (Job.objects.filter(enabled=True, next_run_at__isnull=False)
                  .exclude(tenant__slug__startswith=PREFIX).count())
        retrying = JobRun.objects.filter(state=RunState.RETRYING).exclude(tenant__slug__startswith=PREFIX).count()
        if others or retrying:
            raise CommandError(f"bench: database {name!r} has {others} scheduled non-bench jobs and {retrying} "
                               "retrying runs; the bench's beats would fire them. Use a dedicated database",
                               returncode=2)

    def redis_messages(self) -> int:
        with self.redis.pipeline(transaction=False) as pipe:
            for key in self.queue_keys:
                pipe.llen(key)
            return sum(pipe.execute())

    def clean(self) -> None:
        """Delete bench tenants with their jobs, runs and audit events; flush the bench queue."""
        tenant = Tenant._meta.db_table
        job = Job._meta.db_table
        run = JobRun._meta.db_table
        audit = AuditEvent._meta.db_table
        bench_tenants = f"SELECT id FROM {tenant} WHERE slug LIKE %s"
        pattern = PREFIX + "%"
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {audit} WHERE tenant_id IN ({bench_tenants})", [pattern])
            # Other tenants' audit rows cannot name bench jobs or runs, but if one did the
            # deletes below would fail on its foreign key: detach it as SET_NULL would.
            cursor.execute(f"UPDATE {audit} SET job_id = NULL WHERE job_id IN "
                           f"(SELECT id FROM {job} WHERE tenant_id IN ({bench_tenants}))", [pattern])
            cursor.execute(f"UPDATE {audit} SET run_id = NULL WHERE run_id IN "
                           f"(SELECT id FROM {run} WHERE tenant_id IN ({bench_tenants}))", [pattern])
            cursor.execute(f"DELETE FROM {run} WHERE tenant_id IN ({bench_tenants})", [pattern])
            cursor.execute(f"DELETE FROM {job} WHERE tenant_id IN ({bench_tenants})", [pattern])
            cursor.execute(f"DELETE FROM {tenant} WHERE slug LIKE %s", [pattern])
        # The lists, and the bindings the beats' maybe_declare left for exchange "bench".
        prefix = (getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}).get("global_keyprefix", "")
        bindings = [f"{prefix}_kombu.binding.{QUEUE}", f"{prefix}_kombu.binding_permanent.{QUEUE}"]
        self.redis.delete(*self.queue_keys, *bindings)

    # --- the dispatch scenario -------------------------------------------------------------

    def note(self, message: str) -> None:
        if self.verbosity >= 1:
            self.stderr.write(f"bench: {message}")

    def seed(self, jobs: int) -> list[int]:
        started = time.monotonic()
        tenants = Tenant.objects.bulk_create(
            Tenant(slug=f"{PREFIX}{i}", name=f"Bench tenant {i}", timezone="UTC") for i in range(TENANTS)
        )
        tenant_ids = [t.id for t in tenants]
        for start in range(0, jobs, SEED_CHUNK):
            Job.objects.bulk_create([
                Job(tenant_id=tenant_ids[i % TENANTS], name=f"bench-job-{i}", cron=CRON, timezone="UTC",
                    task_name=TASK, queue=QUEUE, next_run_at=FAR_FUTURE)
                for i in range(start, min(start + SEED_CHUNK, jobs))
            ])
        with connection.cursor() as cursor:  # the planner sees a steady-state table, not an empty one
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
            cursor.execute(f"VACUUM ANALYZE {JobRun._meta.db_table}")
        self.note(f"seeded {jobs} jobs over {TENANTS} tenants in {time.monotonic() - started:.1f}s")
        return tenant_ids

    def start_beats(self, count: int, batch_size: int) -> list[Beat]:
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = os.environ.get("DJANGO_SETTINGS_MODULE", "project.settings")
        env["PYTHONUNBUFFERED"] = "1"  # "runbeat: started" must reach the pipe when it is written
        # No worker drains the queue here: the bench measures how fast beats fill it, so
        # backpressure (which would stop them at the high-water mark) is off.
        env["CRONFLEET_QUEUE_HIGH_WATER"] = "0"
        argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), "runbeat", "--batch-size", str(batch_size)]
        return [Beat(n, argv, env) for n in range(1, count + 1)]

    def wait_started(self, beats: list[Beat]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        for beat in beats:
            while not beat.started.wait(timeout=0.05):
                if not beat.alive() or time.monotonic() > deadline:
                    raise CommandError(f"bench: beat {beat.number} did not start:\n" + "\n".join(beat.tail))

    def listeners(self) -> int:
        """Connections to this database whose last statement was the beats' LISTEN.

        A beat opens its LISTEN connection on its first sleep, and that connection runs
        nothing else, so this counts the beats that a NOTIFY would wake now.
        """
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND query = %s", [f"LISTEN {WAKE_CHANNEL}"])
            return cursor.fetchone()[0]

    def wait_listening(self, beats: list[Beat], baseline: int) -> None:
        deadline = time.monotonic() + LISTEN_TIMEOUT
        while self.listeners() < baseline + len(beats):
            if time.monotonic() > deadline:
                self.note(f"only {self.listeners() - baseline} of {len(beats)} beats LISTEN; the others "
                          "will see the spike at the end of their sleep (--max-sleep)")
                return
            time.sleep(0.05)

    def ledger_counts(self, tenant_ids: list[int]) -> tuple[dict[str, int], int, int]:
        """({state: runs}, all runs, distinct (job, scheduled_at)) of the bench tenants."""
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT state, count(*) FROM {JobRun._meta.db_table} WHERE tenant_id = ANY(%s) "
                           "GROUP BY state ORDER BY count(*) DESC", [tenant_ids])
            states = dict(cursor.fetchall())
            cursor.execute(f"SELECT count(DISTINCT (job_id, scheduled_at)) FROM {JobRun._meta.db_table} "
                           "WHERE tenant_id = ANY(%s)", [tenant_ids])
            return states, sum(states.values()), cursor.fetchone()[0]

    def queued_runs(self, tenant_ids: list[int]) -> int:
        return JobRun.objects.filter(tenant_id__in=tenant_ids, state=RunState.QUEUED).count()

    def jobs_left(self, tenant_ids: list[int]) -> bool:
        """Whether a bench job still waits for a beat (end_at = spike: a fired job has none)."""
        return Job.objects.filter(tenant_id__in=tenant_ids, next_run_at__isnull=False).exists()

    def dispatch_bench(self, jobs: int, k: int, batch_size: int, timeout: float, beats: list[Beat]) -> bool:
        tenant_ids = self.seed(jobs)

        baseline = self.listeners()
        if baseline:
            self.note(f"warning: {baseline} other connection(s) LISTEN on this database: is a beat already "
                      "running against it? It would take part in the bench")
        beats.extend(self.start_beats(k, batch_size))
        self.wait_started(beats)
        # Every beat has run its first (empty) turn and is asleep, listening for the NOTIFY.
        self.wait_listening(beats, baseline)
        for beat in beats:
            beat.rss_after_start_kb = _status_kb(beat.pid, "VmRSS")
        self.note("beats started: " + ", ".join(f"{b.startup_seconds:.2f}s" for b in beats))

        # The spike: one UPDATE makes every bench job due at the database's now. end_at = the
        # same instant makes each job fire exactly once even if a minute boundary passes
        # before a beat reaches it (otherwise "* * * * *" would fire twice, and again every
        # minute while the bench runs). The NOTIFY (delivered at commit) wakes sleeping beats,
        # as a real job edit does; a real spike wakes them by their own sleep deadline.
        for beat in beats:
            beat.cpu_at_spike = _cpu_seconds(beat.pid)
        spike = db_now()
        update_started = time.monotonic()
        with transaction.atomic():
            updated = Job.objects.filter(tenant_id__in=tenant_ids).update(next_run_at=spike, end_at=spike)
            wake_beats()
        t0 = time.monotonic()
        ticks_at_spike = _machine_ticks()
        self_at_spike = sum(os.times()[:2])
        servers_at_spike = {name: _cpu_by_command(name) for name in ("postgres", "redis-server")}
        self.note(f"spike: {updated} jobs due at {spike.isoformat()} (UPDATE took {t0 - update_started:.2f}s)")

        elapsed = None
        messages = queued = 0
        deadline = t0 + timeout
        next_check = t0 + 1.0
        while True:
            now = time.monotonic()
            messages = self.redis_messages()
            # Runs are committed before they are published, so the queue can only lag the
            # ledger: ask PostgreSQL once Redis has them all.
            if messages >= jobs:
                queued = self.queued_runs(tenant_ids)
                if queued >= jobs:
                    elapsed = now - t0
                    break
            elif now >= next_check:
                # The beats can be done without N queued runs: fires later than the misfire
                # grace are recorded as skipped. Stop once no job is left and every queued
                # run is published, instead of waiting for the timeout.
                next_check = now + 1.0
                if not self.jobs_left(tenant_ids) and messages >= self.queued_runs(tenant_ids):
                    self.stderr.write(f"bench: every bench job was dispatched after {now - t0:.2f}s, "
                                      f"but only {messages} of {jobs} runs were enqueued")
                    break
            dead = [beat for beat in beats if not beat.alive()]
            if dead:
                self.stderr.write(f"bench: beat {dead[0].number} exited with {dead[0].proc.returncode}:\n"
                                  + "\n".join(dead[0].tail))
                break
            if now > deadline:
                queued = self.queued_runs(tenant_ids)
                self.stderr.write(f"bench: timeout after {timeout:g}s: {queued} queued runs, "
                                  f"{messages} messages of {jobs}")
                break
            time.sleep(POLL_SECONDS)

        ticks_at_end = _machine_ticks()
        self.self_cpu = sum(os.times()[:2]) - self_at_spike
        self.server_cpu = {name: _cpu_delta(before, _cpu_by_command(name))
                           for name, before in servers_at_spike.items()}
        for beat in beats:  # just before stopping: the high-water mark of the whole run
            beat.peak_rss_kb = _status_kb(beat.pid, "VmHWM")
            beat.cpu_at_end = _cpu_seconds(beat.pid)
        self.machine_busy = self.machine_busy_cpu = None
        if ticks_at_spike and ticks_at_end and ticks_at_end[1] > ticks_at_spike[1]:
            busy = ticks_at_end[0] - ticks_at_spike[0]
            self.machine_busy = busy / (ticks_at_end[1] - ticks_at_spike[1])
            self.machine_busy_cpu = busy / os.sysconf("SC_CLK_TCK")
        codes = [beat.stop() for beat in beats]

        # Counted after the beats stopped, so a late duplicate would be seen too.
        states, total, distinct = self.ledger_counts(tenant_ids)
        messages = self.redis_messages()
        return self.report(jobs, k, batch_size, elapsed, timeout, beats, codes, states, total, distinct, messages)

    def report(self, jobs, k, batch_size, elapsed, timeout, beats, codes, states, total, distinct, messages) -> bool:
        out = self.stdout.write
        queued = states.get(RunState.QUEUED.value, 0)
        by_state = ", ".join(f"{count} {state}" for state, count in states.items())
        checks = [  # (label, shown value, passed)
            ("runs in ledger == N, all queued", f"{total} ({by_state or 'none'})", total == jobs and queued == jobs),
            ("distinct (job, scheduled_at) == N", str(distinct), distinct == jobs),
            ("Redis messages == N", str(messages), messages == jobs),
            ("all enqueued within --timeout", "yes" if elapsed is not None else "no", elapsed is not None),
            ("beats exited cleanly", " ".join(map(str, codes)), all(code == 0 for code in codes)),
        ]
        db = settings.DATABASES["default"]
        out(f"bench dispatch on PostgreSQL {db['NAME']!r} at {db.get('HOST') or 'local'}, broker "
            f"{self.broker_label()}, queue {QUEUE!r}, {os.cpu_count()} CPUs, load average "
            + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        # CPU seconds between the spike and the end: robust to other load on the machine,
        # unlike the wall-clock seconds (postgres and redis only when they run on this host).
        beats_cpu = sum(b.cpu_at_end - b.cpu_at_spike for b in beats
                        if b.cpu_at_end is not None and b.cpu_at_spike is not None)
        rows = [
            ("jobs", f"{jobs}"),
            ("beats", f"{k}"),
            ("batch size", f"{batch_size}"),
            ("seconds to enqueue all", f"{elapsed:.2f}" if elapsed is not None else "n/a"),
            ("fires/s", f"{jobs / elapsed:.0f}" if elapsed else "n/a"),
            ("machine CPU busy", f"{self.machine_busy:.0%}" if self.machine_busy is not None else "n/a"),
            ("beats CPU s", f"{beats_cpu:.2f}"),
            ("postgres CPU s (this host)", f"{self.server_cpu['postgres']:.2f}"),
            ("redis CPU s (this host)", f"{self.server_cpu['redis-server']:.2f}"),
            ("bench command CPU s", f"{self.self_cpu:.2f}"),
            # Everything else the machine did meanwhile: near 0 on a quiet machine.
            ("other processes CPU s", "n/a" if self.machine_busy_cpu is None else
             f"{self.machine_busy_cpu - beats_cpu - sum(self.server_cpu.values()) - self.self_cpu:.2f}"),
            ("CPU us per run recorded", f"{(beats_cpu + sum(self.server_cpu.values())) / total * 1e6:.0f}"
             if total else "n/a"),
        ]
        for label, value in rows:
            out(f"  {label:<28}{value:>10}")
        out(f"  {'beat':<6}{'start-up s':>12}{'RSS after start MiB':>21}{'peak RSS MiB':>14}"
            f"{'CPU s':>8}{'turns':>8}{'runs published':>16}")
        for beat in beats:
            startup = f"{beat.startup_seconds:.2f}" if beat.startup_seconds is not None else "n/a"
            cpu = ("n/a" if beat.cpu_at_spike is None or beat.cpu_at_end is None
                   else f"{beat.cpu_at_end - beat.cpu_at_spike:.2f}")
            out(f"  {beat.number:<6}{startup:>12}{_mib(beat.rss_after_start_kb):>21}{_mib(beat.peak_rss_kb):>14}"
                f"{cpu:>8}{beat.turns:>8}{beat.published:>16}")
        out("  checks")
        for label, shown, passed in checks:
            out(f"    {label:<36}{shown:>30}  {'ok' if passed else 'FAIL'}")
        return all(passed for _, _, passed in checks)
