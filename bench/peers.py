"""bench peers: the same N fires due at one instant S through Cronfleet's beats
(dispatch.py), django-celery-beat's DatabaseScheduler and RedBeat, one after the other on
the same machine, database and broker, in one command; and the floor of any scheduler that
sends one Celery message per fire: one process calling send_task N times.

Each peer runs as its real `celery -A bench.peer_app beat -S ...`
process, with N periodic tasks whose next fire is S (an interval of one day whose last run
was a day before S): PeriodicTask rows for django-celery-beat, RedBeat entries in Redis.
What is counted is the messages that reach the Redis queue. A peer that cannot send all N
within --cap seconds of S is stopped there, and the row says how many it sent.

Start-up: for Cronfleet, spawn until each beat's first turn is done (--alive-file); for a
peer, spawn until its first tick has sent a canary task due at once (queue
bench-peers-canary), which is the same moment: the schedule loaded, the first pass done.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from bench import common, dispatch
from scheduler_app.models import db_now
from scheduler_app.queues import redis_list_keys

QUEUE = "bench-peers"
CANARY_QUEUE = "bench-peers-canary"
TASK = "scheduler_app.echo"
NAME_PREFIX = "bench-peers-"
REDBEAT_PREFIX = "bench-peers-redbeat:"  # as peer_app.REDBEAT_PREFIX (not imported: it sets up Django)
PEER_SETTINGS = "bench.peer_settings"
PEER_APP = "bench.peer_app"
START_SECONDS = 120.0  # + 1 s per 1,000 tasks: django-celery-beat loads every task at start (~40 s at 100,000)
DCB_TASK = "django_celery_beat_periodictask"
DCB_INTERVAL = "django_celery_beat_intervalschedule"
INSTALL_HINT = "pip install -r requirements-bench.txt"


@dataclass
class Options:
    jobs: int
    beats: int = 1
    batch_size: int = 1000
    cap: float = 120.0
    grace: int | None = None
    lead: float | None = None  # seconds from a peer's seeding to its spike; None: from N


@dataclass
class Row:
    label: str
    sent: int = 0
    seconds: float | None = None  # S -> all N in Redis; None: not within the cap
    window: float = 0.0  # seconds measured (to all sent, or the cap)
    startup: float | None = None
    peak_rss_kb: int | None = None
    cpu: float | None = None  # the scheduler's own CPU seconds over the window
    note: str = ""

    @property
    def rate(self) -> float | None:
        return self.sent / self.window if self.window else None


@dataclass
class Result:
    rows: list[Row] = field(default_factory=list)
    checks: list[tuple[str, str, bool]] = field(default_factory=list)


def missing_peers() -> list[str]:
    missing = []
    for module, package in (("django_celery_beat", "django-celery-beat"), ("redbeat", "celery-redbeat")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    return missing


def messages(client, queue: str) -> int:
    return dispatch.redis_messages(client, queue)


def clean(client) -> None:
    """Delete the peers' rows and keys (what clean() of bench.py does not know about)."""
    keys = list(client.scan_iter(match=REDBEAT_PREFIX + "*", count=10000))
    for start in range(0, len(keys), 10000):
        client.delete(*keys[start : start + 10000])
    client.delete(*redis_list_keys(CANARY_QUEUE), f"_kombu.binding.{CANARY_QUEUE}")
    if DCB_TASK in connection.introspection.table_names():
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {DCB_TASK} WHERE name LIKE %s", [NAME_PREFIX + "%"])


def peer_env() -> dict[str, str]:
    env = dispatch.common_env()
    env["DJANGO_SETTINGS_MODULE"] = PEER_SETTINGS
    return env


def floor(client, jobs: int) -> Row:
    """One process calling send_task N times over one producer: the most any scheduler
    that sends a Celery message per fire (both peers do) can reach."""
    from project.celery import app

    row = Row("floor: send_task x N, one process")
    client.delete(*redis_list_keys(QUEUE))
    started = time.monotonic()
    cpu = time.process_time()
    with app.producer_or_acquire() as producer:
        for _ in range(jobs):
            app.send_task(TASK, queue=QUEUE, producer=producer)
    while messages(client, QUEUE) < jobs and time.monotonic() < started + 60:
        time.sleep(0.01)
    row.window = time.monotonic() - started
    row.cpu = time.process_time() - cpu
    row.sent = messages(client, QUEUE)
    row.seconds = row.window if row.sent >= jobs else None
    row.note = "no schedule, no state: just the messages"
    client.delete(*redis_list_keys(QUEUE))
    return row


def cronfleet(opts: Options, note, client) -> tuple[Row, list]:
    outcome = dispatch.measure(
        dispatch.Options(
            jobs=opts.jobs,
            beats=opts.beats,
            batch_size=opts.batch_size,
            timeout=opts.cap,
            grace=opts.grace,
            floor_jobs=0,
        ),
        note,
        client,
        label="peers",
    )
    row = Row(
        f"cronfleet: runbeat x {opts.beats}",
        sent=outcome.messages,
        seconds=outcome.seconds,
        window=outcome.seconds if outcome.seconds is not None else opts.cap,
        startup=max((b.ready or 0 for b in outcome.beats), default=None),
        peak_rss_kb=max((b.peak_rss_kb or 0 for b in outcome.beats), default=None),
        cpu=outcome.cpu.get("beats"),
        note="runs recorded in the ledger too",
    )
    return row, [(f"cronfleet: {label}", shown, ok) for label, shown, ok in outcome.checks]


def seed_dcb(jobs: int, spike: datetime) -> None:
    """N PeriodicTask rows due at S (every day, last run a day before S) and a canary due now."""
    subprocess.run(
        [sys.executable, str(settings.BASE_DIR / "manage.py"), "migrate", "django_celery_beat", "-v0"],
        env=peer_env(),
        check=True,
    )
    with connection.cursor() as cursor:
        ids = {}
        for every in (86400, 3600):
            cursor.execute(
                f"SELECT id FROM {DCB_INTERVAL} WHERE every = %s AND period = 'seconds' ORDER BY id LIMIT 1", [every]
            )
            row = cursor.fetchone()
            if row is None:
                cursor.execute(
                    f"INSERT INTO {DCB_INTERVAL} (every, period) VALUES (%s, 'seconds') RETURNING id", [every]
                )
                row = cursor.fetchone()
            ids[every] = row[0]
        columns = (
            "name, task, args, kwargs, queue, enabled, last_run_at, total_run_count, date_changed, "
            "description, interval_id, one_off, headers"
        )
        cursor.execute(
            f"""
            INSERT INTO {DCB_TASK} ({columns})
            SELECT %(prefix)s || n, %(task)s, '[]', '{{}}', %(queue)s, true, %(last)s, 0, now(), '',
                   %(interval)s, false, '{{}}'
              FROM generate_series(0, %(n)s - 1) AS n""",
            {
                "prefix": NAME_PREFIX,
                "task": TASK,
                "queue": QUEUE,
                "last": spike - timedelta(days=1),
                "interval": ids[86400],
                "n": jobs,
            },
        )
        cursor.execute(
            f"""
            INSERT INTO {DCB_TASK} ({columns})
            VALUES (%(name)s, %(task)s, '[]', '{{}}', %(queue)s, true, now() - interval '2 hours', 0, now(), '',
                    %(interval)s, false, '{{}}')""",
            {"name": NAME_PREFIX + "canary", "task": TASK, "queue": CANARY_QUEUE, "interval": ids[3600]},
        )
        cursor.execute(f"ANALYZE {DCB_TASK}")


def seed_redbeat(jobs: int, spike: datetime) -> None:
    """N RedBeat entries due at S (every day, last run a day before S) and a canary due now."""
    from celery.schedules import schedule
    from redbeat.schedulers import RedBeatSchedulerEntry

    from project.celery import app

    app.conf.update(redbeat_redis_url=app.conf.broker_url, redbeat_redis_options={}, redbeat_key_prefix=REDBEAT_PREFIX)
    daily, hourly = schedule(run_every=timedelta(days=1)), schedule(run_every=timedelta(hours=1))
    for n in range(jobs):
        entry = RedBeatSchedulerEntry(f"{NAME_PREFIX}{n}", TASK, daily, options={"queue": QUEUE}, app=app)
        entry.last_run_at = spike - timedelta(days=1)
        entry.save()
    canary = RedBeatSchedulerEntry(f"{NAME_PREFIX}canary", TASK, hourly, options={"queue": CANARY_QUEUE}, app=app)
    canary.last_run_at = spike - timedelta(days=1)  # due at once (celery's entry says "ran now" otherwise)
    canary.save()


def peer_lead(opts: Options, default: float) -> float:
    """Seconds from the start of a peer's seeding to its spike: --lead when given (a loaded
    machine starts a scheduler slower), else `default`."""
    return opts.lead if opts.lead is not None else default


def peer(label: str, scheduler: str, opts: Options, note, client, spike: datetime) -> tuple[Row, list]:
    """Run one peer's real beat from before S until it sent N messages or the cap passed."""
    row = Row(label)
    checks = []
    client.delete(*redis_list_keys(QUEUE), *redis_list_keys(CANARY_QUEUE))
    children = common.Children()
    try:
        proc = children.start(
            "beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                PEER_APP,
                "beat",
                "-S",
                scheduler,
                "-l",
                "info",
                "-s",
                str(children.folder / "celerybeat-schedule"),
                "--pidfile",
                str(children.folder / "beat.pid"),
            ],
            peer_env(),
        )
        deadline = time.monotonic() + START_SECONDS + opts.jobs / 1000
        while messages(client, CANARY_QUEUE) < 1:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bench: {label} did not start:\n{children.log('beat')[-3000:]}")
            time.sleep(0.01)
        row.startup = time.monotonic() - children.spawned["beat"]
        early = (spike - db_now()).total_seconds()
        note(f"{label}: started in {row.startup:.2f}s; the spike in {early:.1f}s")
        checks.append((f"{label}: started before the spike", f"{early:.1f}s to spare", early > 0.2))
        if early <= 0.2:
            return row, checks
        common.sleep_until(spike - timedelta(seconds=0.1))
        cpu_before = common.tree_cpu(proc.pid)
        at_spike = common.sleep_until(spike)
        while True:
            now = time.monotonic()
            row.sent = messages(client, QUEUE)
            if row.sent >= opts.jobs:
                row.seconds = row.window = now - at_spike
                break
            if proc.poll() is not None:
                break
            if now > at_spike + opts.cap:
                row.window = now - at_spike
                row.note = f"stopped at the cap: {row.sent:,} of {opts.jobs:,} sent in {opts.cap:g}s"
                break
            time.sleep(dispatch.POLL_SECONDS)
        row.cpu = common.tree_cpu(proc.pid) - cpu_before
        row.peak_rss_kb = common.status_kb(proc.pid, "VmHWM")
        code = children.stop("beat", timeout=60)
        checks.append((f"{label}: exited cleanly", str(code), code in (0, -15)))
        checks.append((f"{label}: at most one message per task", f"{row.sent:,}", row.sent <= opts.jobs))
    finally:
        children.stop_all()
        client.delete(*redis_list_keys(QUEUE), *redis_list_keys(CANARY_QUEUE))
    return row, checks


def run(command, opts: Options) -> bool:
    missing = missing_peers()
    if missing:
        command.stderr.write(f"bench peers: {', '.join(missing)} not installed; run: {INSTALL_HINT}")
        return False
    note, client = command.note, command.redis
    result = Result()
    result.rows.append(floor(client, opts.jobs))
    note(f"floor: {result.rows[0].sent} messages in {result.rows[0].window:.2f}s")

    row, checks = cronfleet(opts, note, client)
    result.rows.append(row)
    result.checks += checks
    command.clean()

    lead = peer_lead(opts, 15.0 + opts.jobs / 2000)  # django-celery-beat reads every row at start
    spike = common.next_whole_second(db_now(), lead)
    seed_dcb(opts.jobs, spike)
    note(f"django-celery-beat: {opts.jobs} PeriodicTask rows due at {spike.isoformat()}")
    row, checks = peer(
        "django-celery-beat DatabaseScheduler",
        "django_celery_beat.schedulers:DatabaseScheduler",
        opts,
        note,
        client,
        spike,
    )
    result.rows.append(row)
    result.checks += checks
    clean(client)

    lead = peer_lead(opts, 15.0 + opts.jobs / 2000)  # RedBeat's entries are written one by one here
    spike = common.next_whole_second(db_now(), lead)
    seed_redbeat(opts.jobs, spike)
    note(f"redbeat: {opts.jobs} entries due at {spike.isoformat()}")
    row, checks = peer("RedBeat", "redbeat.RedBeatScheduler", opts, note, client, spike)
    result.rows.append(row)
    result.checks += checks
    clean(client)
    return report(command.stdout.write, opts, result, command.broker_label())


def report(w, opts: Options, result: Result, broker: str) -> bool:
    w(
        f"bench peers: {opts.jobs:,} fires due at one instant S, each scheduler alone on this machine; "
        f"cap {opts.cap:g}s; broker {broker}; " + common.machine_line()
    )
    ours = next((r for r in result.rows if r.label.startswith("cronfleet")), None)
    rows = []
    for r in result.rows:
        ratio = "-"
        if ours is not None and ours.rate and r.rate and r is not ours:
            ratio = f"{ours.rate / r.rate:,.1f}x" if ours.rate >= r.rate else f"1/{r.rate / ours.rate:,.1f}"
        rows.append(
            (
                r.label,
                f"{r.sent:,}",
                common.num(r.seconds, 2) if r.seconds is not None else f"> {opts.cap:g}",
                common.num(r.rate),
                common.num(r.startup, 2),
                common.mib(r.peak_rss_kb),
                common.num(r.cpu / r.sent * 1e6 if r.cpu is not None and r.sent else None),
                ratio,
                r.note,
            )
        )
    common.table(
        w,
        ["", "sent", "s to all", "fires/s", "start-up s", "peak RSS MiB", "CPU µs/fire", "cronfleet is", "note"],
        rows,
    )
    w(
        "  (s to all: from S until N messages are in Redis; fires/s: sent / seconds measured, the cap for a "
        "peer that did not finish; CPU: the scheduler process alone; cronfleet's figures include recording "
        "every run in the ledger)"
    )
    return common.print_checks(w, result.checks)
