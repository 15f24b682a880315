"""Benchmarks against a real PostgreSQL and Redis: each prints a table of figures beside its
floor, measured in the same command, and checks itself (it exits 1 when a check fails).
Figures are never asserted by tests: they are for reading.

    manage.py bench dispatch --jobs N [--beats K] [--batch-size B] [--schedule interval|once|cron]
                             [--lead S] [--grace S] [--misfire-policy P] [--floor-jobs F] [--timeout S]
                             [--repeat X]
    manage.py bench peers --jobs N [--cap S] [--beats K] [--lead S]
    manage.py bench steady --jobs N --rate R --seconds T [--beats K] [--workers W] [--concurrency C]
                           [--pool prefork|threads|solo] [--batch B] [--no-floor]
    manage.py bench e2e --jobs N [--workers W] [--concurrency C] [--pool prefork|threads|solo]
                        [--beats K] [--batch B] [--no-floor] [--repeat X]
    (all: [--keep] [--yes])
    manage.py bench http --jobs N [--latency S] [--hosts H] [--in-flight K] [--hang] [--no-floor]
    manage.py bench ledger --jobs N [--rows R] [--load L] [--repeat X] [--beats K]
    manage.py bench autoscale --jobs N [--duration D] [--max-workers M] [--concurrency C] [--lead S]
                              [--target-lag L]
    manage.py bench console --jobs N [--rows R] [--requests X] [--reseed] [--explain]
    manage.py bench flexible --jobs N [--window "daily 01:00-03:00"]
    manage.py bench timedata --jobs N
    manage.py bench tasks --jobs N [--workers W] [--concurrency C] [--pool P] [--no-floor] [--repeat X]


`ledger` (bench/ledger.py) seeds R finished runs for N jobs and prints
the dispatch rate against an empty ledger's, the API's run list and stats latencies, the
plans of the hot statements, and how fast beats prune while L jobs fire every second.
`console` (bench/console.py) times each console page's whole render over a
ledger of R runs it seeds once and keeps (tenants "console-*", which `bench` does not delete).
`flexible` (bench/flexible.py) adds N nightly jobs one by one three ways (a flexible window,
jitter over the window, a fixed time at its start) and prints the peak and mean fires per
minute in the window, and the time per job added. `timedata` (bench/timedata.py) times the
time-data check (`schedules impact`, a beat's start-up check) over N jobs.
`tasks` (bench/djangotasks.py) enqueues N django.tasks calls on Cronfleet's backend, each in its
own transaction, beside N plain Celery calls, and prints enqueue-to-finish for both.

Each scenario is a module of bench/ (dispatch.py, peers.py, steady.py,
e2e.py); what they share is in common.py. This command parses the arguments, checks that
it may run, routes, and cleans up.

It deletes data: every tenant whose slug starts with "bench-" (with its jobs, runs and
audit events), and the bench queues in Redis, before the run and after it (unless
--keep); `peers` also deletes its django-celery-beat rows and RedBeat keys. So it runs
only on PostgreSQL with a redis:// broker, only when the database name contains "bench" or
--yes is given, and only on a database holding no scheduled non-bench jobs (the bench's
beats would fire them).
"""

from __future__ import annotations

import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from bench import autoscale, console, dispatch, djangotasks, e2e, flexible, http, ledger, peers, steady, timedata
from bench.common import PREFIX
from scheduler_app.conf import app_settings
from scheduler_app.models import Alert, AuditEvent, Job, JobRun, RunState, Tenant
from scheduler_app.queues import redis_list_keys


class Command(BaseCommand):
    help = (
        "Benchmarks (dispatch, peers, steady, e2e) printing figures beside their floors. "
        "Deletes bench-* tenants and the bench Redis queues."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "scenario",
            choices=[
                "dispatch",
                "peers",
                "steady",
                "e2e",
                "http",
                "ledger",
                "console",
                "flexible",
                "autoscale",
                "timedata",
                "tasks",
            ],
            help="What to measure",
        )
        parser.add_argument("--jobs", type=int, required=True, help="Jobs (N)")
        parser.add_argument("--beats", type=int, default=None, help="runbeat processes (K; default 1, steady 2)")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=app_settings.BATCH_SIZE,
            help="The beats' --batch-size (default %(default)s)",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=300.0,
            help="Seconds to wait for all runs after the spike (default %(default)s)",
        )
        parser.add_argument(
            "--schedule",
            choices=["interval", "once", "cron"],
            default="interval",
            help="dispatch: the jobs' schedules, each with a fire at the spike S: daily "
            "interval anchored at S, one-off at S, daily cron at S (S on a whole "
            "minute) (default %(default)s)",
        )
        parser.add_argument(
            "--lead",
            type=float,
            default=None,
            help="dispatch, peers (each peer's): seconds from the start of seeding to the spike (default: from N)",
        )
        parser.add_argument(
            "--grace",
            type=int,
            default=None,
            help="dispatch, peers: the beats' misfire grace in seconds (default: CRONFLEET_MISFIRE_GRACE_SECONDS)",
        )
        parser.add_argument(
            "--misfire-policy",
            choices=["run_once", "skip", "run_all"],
            default="run_once",
            help="dispatch: the seeded jobs' misfire policy (default %(default)s)",
        )
        parser.add_argument(
            "--floor-jobs",
            type=int,
            default=100_000,
            help="dispatch: fires the one-process floor writes, at most N (0: none; default %(default)s)",
        )
        parser.add_argument(
            "--cap", type=float, default=120.0, help="peers: seconds each peer gets to enqueue N (default %(default)s)"
        )
        parser.add_argument("--rate", type=float, default=None, help="steady: fires per second (R)")
        parser.add_argument("--seconds", type=float, default=None, help="steady: seconds of steady load (T)")
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            help="e2e, steady, tasks: Celery worker processes (default 1, steady 2)",
        )
        parser.add_argument(
            "--concurrency", type=int, default=None, help="e2e, steady, tasks: each worker's -c (default 2, steady 4)"
        )
        parser.add_argument(
            "--pool",
            choices=["prefork", "threads", "solo"],
            default="prefork",
            help="e2e, steady, tasks: each worker's -P (default prefork)",
        )
        parser.add_argument("--no-floor", action="store_true", help="e2e, steady, tasks: skip the plain-Celery floor")
        parser.add_argument(
            "--batch",
            type=int,
            default=0,
            metavar="B",
            help="e2e, steady: batched jobs, B runs per message (default 0: one run per message)",
        )
        parser.add_argument(
            "--latency",
            type=float,
            default=0.1,
            help="http: seconds the receiver takes to answer (default %(default)s)",
        )
        parser.add_argument(
            "--hosts", type=int, default=1, help="http: receiver hosts, 127.0.0.1 to 127.0.0.H (default %(default)s)"
        )
        parser.add_argument(
            "--in-flight",
            type=int,
            default=None,
            help="http: the worker's CRONFLEET_HTTP_IN_FLIGHT (default: the setting's)",
        )
        parser.add_argument(
            "--hang", action="store_true", help="http: a second run where the last host answers only after the deadline"
        )
        parser.add_argument(
            "--rows", type=int, default=10_000_000, help="ledger: finished runs to seed (default %(default)s)"
        )
        parser.add_argument(
            "--load",
            type=int,
            default=1667,
            help="ledger: jobs firing every second while beats prune (default %(default)s: 100,000 a minute)",
        )
        parser.add_argument(
            "--repeat",
            type=int,
            default=None,
            help="ledger: spikes per ledger size, the median (default 3); e2e: rounds of the floor "
            "then Cronfleet, each round's share of the floor and the median (default 1); dispatch: "
            "spikes, each with its floor after it, and the median share (default 1)",
        )
        parser.add_argument(
            "--requests",
            type=int,
            default=20,
            help="console: requests a page, the median and p95 (default %(default)s)",
        )
        parser.add_argument(
            "--reseed", action="store_true", help="console: seed the console ledger again even when one is there"
        )
        parser.add_argument(
            "--explain", action="store_true", help="console: EXPLAIN (ANALYZE, BUFFERS) every statement of every page"
        )
        parser.add_argument(
            "--window", default=flexible.DEFAULT_WINDOW, help="flexible: the jobs' daily window (default %(default)r)"
        )
        parser.add_argument(
            "--duration",
            type=float,
            default=2.0,
            help="autoscale: seconds each run of the spike takes (default %(default)s)",
        )
        parser.add_argument(
            "--max-workers",
            type=int,
            default=4,
            help="autoscale: the most workers a controller may start (default %(default)s)",
        )
        parser.add_argument(
            "--target-lag",
            type=float,
            default=10.0,
            help="autoscale: the forecast's target start lag in seconds (default %(default)s)",
        )
        parser.add_argument("--keep", action="store_true", help="Leave the bench rows and messages in place at the end")
        parser.add_argument(
            "--yes", action="store_true", help="Run even though the database name does not contain 'bench'"
        )

    # --- entry -------------------------------------------------------------------------

    def handle(
        self,
        *args,
        scenario: str,
        jobs: int,
        beats: int | None,
        batch_size: int,
        timeout: float,
        keep: bool,
        yes: bool,
        **options,
    ) -> None:
        if jobs < 1 or (beats is not None and beats < 1) or batch_size < 1 or timeout <= 0:
            raise CommandError(
                "bench: --jobs, --beats and --batch-size must be at least 1, --timeout positive", returncode=2
            )
        if options.get("repeat") is not None and options["repeat"] < 1:
            raise CommandError("bench: --repeat must be at least 1", returncode=2)
        if scenario == "steady" and (
            not options["rate"] or not options["seconds"] or options["rate"] <= 0 or options["seconds"] <= 0
        ):
            raise CommandError("bench steady: --rate and --seconds are required and positive", returncode=2)
        self.preflight(yes, scenario)
        import redis  # the broker is redis:// (checked above); redis-py comes with kombu's transport

        self.redis = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        try:
            self.redis.ping()
        except redis.RedisError as exc:
            raise CommandError(f"bench: cannot reach the broker {self.broker_label()}: {exc}", returncode=2) from None
        self.verbosity = options.get("verbosity", 1)
        # Queues each scenario fills, flushed before and after (a scenario adds its own).
        self.extra_queues: list[str] = [
            dispatch.QUEUE,
            dispatch.FLOOR_QUEUE,
            e2e.QUEUE,
            peers.QUEUE,
            steady.QUEUE,
            djangotasks.QUEUE,
        ]

        self.clean()
        # SIGTERM (and SIGINT, which a shell ignores in background jobs) must still stop the
        # children and clean up: turn both into an exception that unwinds through `finally`.
        previous = {sig: signal.signal(sig, self.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if scenario == "e2e":
                ok = e2e.run(
                    self,
                    e2e.Options(
                        jobs=jobs,
                        workers=options["workers"] or 1,
                        concurrency=options["concurrency"] or 2,
                        pool=options["pool"],
                        beats=beats or 1,
                        batch_size=batch_size,
                        timeout=timeout,
                        floor=not options["no_floor"],
                        batch=options["batch"],
                        repeat=options["repeat"] or 1,
                    ),
                )
            elif scenario == "http":
                ok = http.run(
                    self,
                    http.Options(
                        jobs=jobs,
                        latency=options["latency"],
                        hosts=max(1, options["hosts"]),
                        in_flight=options["in_flight"],
                        hang=options["hang"],
                        timeout=timeout,
                        floor=not options["no_floor"],
                    ),
                )
            elif scenario == "dispatch":
                ok = dispatch.run(
                    self,
                    dispatch.Options(
                        jobs=jobs,
                        beats=beats or 1,
                        batch_size=batch_size,
                        timeout=timeout,
                        schedule=options["schedule"],
                        lead=options["lead"],
                        grace=options["grace"],
                        floor_jobs=max(0, options["floor_jobs"]),
                        misfire_policy=options["misfire_policy"],
                        repeat=options["repeat"] or 1,
                    ),
                )
            elif scenario == "peers":
                ok = peers.run(
                    self,
                    peers.Options(
                        jobs=jobs,
                        beats=beats or 1,
                        batch_size=batch_size,
                        cap=options["cap"],
                        grace=options["grace"],
                        lead=options["lead"],
                    ),
                )
            elif scenario == "ledger":
                ok = ledger.run(
                    self,
                    ledger.Options(
                        jobs=jobs,
                        rows=options.get("rows") or 0,
                        beats=beats or 1,
                        batch_size=batch_size,
                        load=min(options.get("load") or 0, jobs),
                        repeat=options.get("repeat") or 3,
                        timeout=timeout,
                    ),
                )
            elif scenario == "tasks":
                ok = djangotasks.run(
                    self,
                    djangotasks.Options(
                        jobs=jobs,
                        workers=options["workers"] or 1,
                        concurrency=options["concurrency"] or 2,
                        pool=options["pool"],
                        timeout=timeout,
                        floor=not options["no_floor"],
                        repeat=options["repeat"] or 1,
                    ),
                )
            elif scenario == "flexible":
                ok = flexible.run(self, flexible.Options(jobs=jobs, window=options["window"]))
            elif scenario == "timedata":
                ok = timedata.run(self, timedata.Options(jobs=jobs))
            elif scenario == "autoscale":
                ok = autoscale.run(
                    self,
                    autoscale.Options(
                        jobs=jobs,
                        duration=options["duration"],
                        max_workers=max(1, options["max_workers"]),
                        concurrency=options["concurrency"] or 4,
                        lead=options["lead"] or 90.0,
                        target_lag=options["target_lag"],
                        timeout=timeout,
                    ),
                )
            elif scenario == "console":
                ok = console.run(
                    self,
                    console.Options(
                        jobs=jobs,
                        rows=options.get("rows") or 0,
                        requests=max(1, options["requests"]),
                        reseed=options["reseed"],
                        explain=options["explain"],
                    ),
                )
            else:
                ok = steady.run(
                    self,
                    steady.Options(
                        jobs=jobs,
                        rate=options["rate"],
                        seconds=options["seconds"],
                        beats=beats or 2,
                        batch_size=batch_size,
                        workers=options["workers"] or 2,
                        concurrency=options["concurrency"] or 4,
                        pool=options["pool"],
                        timeout=timeout,
                        floor=not options["no_floor"],
                        batch=options["batch"],
                    ),
                )
        finally:
            for sig, handler in previous.items():  # a second signal during clean-up acts as usual
                signal.signal(sig, handler)
            if not keep:
                self.clean()
        if not ok:
            raise CommandError("bench: FAILED (see the checks above)", returncode=1)

    def on_signal(self, signum: int, frame) -> None:
        raise CommandError(
            f"bench: interrupted by {signal.Signals(signum).name}; stopping the children", returncode=130
        )

    def note(self, message: str) -> None:
        if self.verbosity >= 1:
            self.stderr.write(f"bench: {message}")

    # --- safety --------------------------------------------------------------------------

    def broker_label(self) -> str:
        url = settings.CELERY_BROKER_URL
        if "@" in url:  # hide a password
            scheme, rest = url.split("://", 1)
            url = f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url

    def preflight(self, yes: bool, scenario: str = "") -> None:
        if connection.vendor != "postgresql":
            raise CommandError(
                f"bench: needs PostgreSQL (DATABASE_URL=postgres://...), not {connection.vendor}", returncode=2
            )
        if not str(settings.CELERY_BROKER_URL).startswith(("redis://", "rediss://")):
            raise CommandError(
                f"bench: needs a Redis broker (CELERY_BROKER_URL=redis://...), not "
                f"{settings.CELERY_BROKER_URL.split('://', 1)[0]}://",
                returncode=2,
            )
        name = str(settings.DATABASES["default"]["NAME"])
        if "bench" not in name and not yes:
            raise CommandError(
                f"bench: deletes '{PREFIX}*' tenants and flushes the bench queues; database "
                f"{name!r} has no 'bench' in its name, pass --yes to run anyway",
                returncode=2,
            )
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError(
                f"bench: database {name!r} has unapplied migrations; run manage.py migrate first", returncode=2
            )
        # The beats fire every due job in the database, not only ours: refuse to fire real ones.
        others = Job.objects.filter(enabled=True, next_run_at__isnull=False).exclude(tenant__slug__startswith=PREFIX)
        if scenario == "console":  # runs no beat; its own jobs (left enabled by an interrupted run) are its to reset
            others = others.exclude(tenant__slug__startswith=console.PREFIX)
        others = others.count()
        retrying = JobRun.objects.filter(state=RunState.RETRYING).exclude(tenant__slug__startswith=PREFIX).count()
        if others or retrying:
            raise CommandError(
                f"bench: database {name!r} has {others} scheduled non-bench jobs and {retrying} "
                "retrying runs; the bench's beats would fire them. Use a dedicated database",
                returncode=2,
            )

    def clean(self) -> None:
        """Delete bench tenants with their jobs, runs and audit events; flush the bench queues."""
        tenant = Tenant._meta.db_table
        job = Job._meta.db_table
        run = JobRun._meta.db_table
        audit = AuditEvent._meta.db_table
        alert = Alert._meta.db_table
        bench_tenants = f"SELECT id FROM {tenant} WHERE slug LIKE %s"
        pattern = PREFIX + "%"
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {audit} WHERE tenant_id IN ({bench_tenants})", [pattern])
            cursor.execute(f"DELETE FROM {alert} WHERE tenant_id IN ({bench_tenants})", [pattern])
            # Other tenants' audit rows cannot name bench jobs or runs, but if one did the
            # deletes below would fail on its foreign key: detach it as SET_NULL would.
            cursor.execute(
                f"UPDATE {audit} SET job_id = NULL WHERE job_id IN "
                f"(SELECT id FROM {job} WHERE tenant_id IN ({bench_tenants}))",
                [pattern],
            )
            cursor.execute(
                f"UPDATE {audit} SET run_id = NULL WHERE run_id IN "
                f"(SELECT id FROM {run} WHERE tenant_id IN ({bench_tenants}))",
                [pattern],
            )
            cursor.execute(f"DELETE FROM {run} WHERE tenant_id IN ({bench_tenants})", [pattern])
            cursor.execute(f"DELETE FROM {job} WHERE tenant_id IN ({bench_tenants})", [pattern])
            cursor.execute(f"DELETE FROM {tenant} WHERE slug LIKE %s", [pattern])
        # The lists, and the bindings the beats' maybe_declare left for each queue's exchange.
        prefix = (getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}).get("global_keyprefix", "")
        keys = [
            key
            for queue in self.extra_queues
            for key in (
                *redis_list_keys(queue),
                f"{prefix}_kombu.binding.{queue}",
                f"{prefix}_kombu.binding_permanent.{queue}",
            )
        ]
        self.redis.delete(*keys)
        peers.clean(self.redis)
