"""bench steady: R fires a second for T seconds through real beats and workers, and the lag
they keep; beside it, in the same command, the floor: plain Celery workers (floor.py, the
same worker settings) running a no-op at the same rate from one paced publisher.

N jobs fire every k = N / R seconds (interval schedules), anchored at S, S + 1 s, ...,
S + k - 1 s in turn, so R fires fall due at every whole second from S on; each job ends at
S + T (end_at), so exactly the fires in [S, S + T) are due. Beats run with the product's
settings (backpressure, misfire grace); workers run the echo task. With --batch B the jobs
opt into batching (Job.batch) and the beats publish up to B of their runs in one message
(CRONFLEET_RUN_BATCH_SIZE); the floor still sends one no-op message per fire.

Printed: fires expected and runs finished; dispatch lag (enqueued_at - scheduled_at) and
start lag (started_at - scheduled_at) p50/p99/max; the same per tenth of T (a lag that
grows is a rate the machine cannot hold); CPU per fire of the beats, the workers, this
database's PostgreSQL backends and Redis; the floor's start lag and CPU per message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection

from bench import common, dispatch, e2e, floor
from scheduler_app.conf import app_settings
from scheduler_app.models import JobRun, db_now
from scheduler_app.queues import redis_list_keys

QUEUE = "bench-steady"
TENANTS = 10
TASK = "scheduler_app.echo"
SLICES = 10
TARGET = {"rate": 1000, "seconds": 300, "p99": 1.0}


@dataclass
class Options:
    jobs: int
    rate: float
    seconds: float
    beats: int = 2
    batch_size: int = 1000
    workers: int = 2
    concurrency: int = 4
    pool: str = "prefork"
    timeout: float = 300.0  # after T, seconds to wait for the last runs to finish
    floor: bool = True
    batch: int = 0  # runs per message (Job.batch, CRONFLEET_RUN_BATCH_SIZE); 0: one run per message


@dataclass
class Measured:
    label: str
    expected: int = 0
    finished: int = 0
    start_lag: tuple[float, float, float] | None = None  # p50, p99, max
    dispatch_lag: tuple[float, float, float] | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    machine_busy: float | None = None
    slices: list[tuple[int, int, float | None, float | None]] = field(default_factory=list)  # fires, done, p99s
    states: dict[tuple[str, str], int] = field(default_factory=dict)
    recorded: int | None = None  # runs in the ledger (cronfleet): fires the beats reached
    held_back: bool = False  # a beat logged that it held a full queue back (backpressure)
    checks: list[tuple[str, str, bool]] = field(default_factory=list)


def interval(opts: Options) -> int:
    """k: every job fires every k seconds, so N jobs give N / k fires a second."""
    return max(1, round(opts.jobs / opts.rate))


def expected_fires(jobs: int, every: int, seconds: float) -> int:
    """Fires in [S, S + T) of N jobs anchored at S + (i mod k)."""
    total = 0
    for offset in range(every):
        count = len(range(offset, jobs, every))  # jobs with this anchor offset
        if offset < seconds:
            total += count * -(-(seconds - offset) // every)  # ceil((T - offset) / k)
    return int(total)


def percentiles(values: list[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    values = sorted(values)
    return values[len(values) // 2], values[min(len(values) - 1, int(len(values) * 0.99))], values[-1]


def measure_floor(opts: Options, note, client) -> Measured:
    """Plain Celery: one process publishes R no-op messages at every whole second for T
    seconds (due = that second); each task records how late it started."""
    rate = opts.jobs / interval(opts)
    result = Measured("plain Celery no-op at the same rate (floor)", expected=int(rate) * int(opts.seconds))
    client.delete(floor.LAGS, *redis_list_keys(floor.QUEUE))
    children = common.Children()
    try:
        names = e2e.start_workers(children, "bench.floor", floor.QUEUE, opts)
        e2e.wait_ready(floor.app, names, children)
        note(f"floor: {opts.workers} worker(s) ready; {int(rate)} messages a second for {opts.seconds:g}s")
        meter = common.CpuMeter({"workers": lambda: children.pids("worker"), "publisher (this command)": lambda: []})
        first = int(time.time()) + 2
        meter.start()
        with floor.app.producer_or_acquire() as producer:
            for second in range(int(opts.seconds)):
                due = first + second
                time.sleep(max(0.0, due - time.time()))
                with producer.batch(max_size=1000):
                    for _ in range(int(rate)):
                        floor.timed.apply_async(args=[due], queue=floor.QUEUE, producer=producer)
        deadline = time.time() + opts.timeout
        while client.llen(floor.LAGS) < result.expected and time.time() < deadline:
            time.sleep(0.2)
        meter.stop()
        # The publisher is this command: its CPU is "bench command" in the meter.
        meter.used["publisher (this command)"] = meter.used.pop("bench command")
        result.cpu, result.machine_busy = meter.used, meter.machine_busy
        lags = [float(x) for x in client.lrange(floor.LAGS, 0, -1)]
        result.finished = len(lags)
        result.start_lag = percentiles(lags)
        result.checks.append(
            ("floor: messages run", f"{result.finished:,}/{result.expected:,}", result.finished == result.expected)
        )
    finally:
        children.stop_all()
        client.delete(floor.LAGS, *redis_list_keys(floor.QUEUE))
    return result


def measure_cronfleet(opts: Options, note, client) -> Measured:
    every = interval(opts)
    batching = f", batches of {opts.batch}" if opts.batch else ""
    result = Measured(
        f"cronfleet: {opts.beats} beat(s), ledger, echo task{batching}",
        expected=expected_fires(opts.jobs, every, opts.seconds),
    )
    tenant_ids: list[int] = []
    children = common.Children()
    try:
        from project.celery import app as project_app

        # Workers first (they need no job): the first fire is then only the seeding and the
        # beats' start-up away.
        names = e2e.start_workers(children, "project", QUEUE, opts)
        e2e.wait_ready(project_app, names, children)
        common.vacuum()
        start = common.next_whole_second(db_now(), 10.0 + opts.jobs / 25_000)
        end = start + timedelta(seconds=opts.seconds)
        tenant_ids = common.make_tenants(TENANTS, "steady")
        seed_seconds = common.seed_jobs(
            tenant_ids,
            opts.jobs,
            task_name=TASK,
            queue=QUEUE,
            every_seconds=every,
            end_at=end - timedelta(milliseconds=1),
            **batched_fields(opts),
            varying={
                "anchor_at": lambda i: start + timedelta(seconds=i % every),
                "next_run_at": lambda i: start + timedelta(seconds=i % every),
            },
        )
        note(
            f"seeded {opts.jobs} jobs every {every}s ({opts.jobs / every:g} fires/s) in {seed_seconds:.1f}s; "
            f"first fires at {start.isoformat()}"
        )
        dispatch.start_beats(children, opts.beats, opts.batch_size, beat_env(opts))
        dispatch.wait_ready(children, opts.beats)
        early = (start - db_now()).total_seconds()
        note(
            f"{opts.workers} worker(s) x -c {opts.concurrency} and {opts.beats} beat(s) ready; "
            f"the first fires in {early:.1f}s"
        )
        result.checks.append(("set-up done before the first fire", f"{early:.1f}s to spare", early > 0.2))
        if early <= 0.2:
            return result
        meter = common.CpuMeter({"beats": lambda: children.pids("beat"), "workers": lambda: children.pids("worker")})
        ends = common.sleep_until(start) + opts.seconds  # time.monotonic() at `end`
        meter.start()
        while time.monotonic() < ends:  # the meter ticks (backends reconnect every minute)
            meter.tick()
            time.sleep(min(0.5, max(0.0, ends - time.monotonic())))
        meter.stop()
        result.cpu, result.machine_busy = meter.used, meter.machine_busy
        note(f"{opts.seconds:g}s of load done; waiting for the last runs to finish")
        deadline = time.monotonic() + opts.timeout
        while finished(tenant_ids) < result.expected and time.monotonic() < deadline:
            if children.dead():
                break
            time.sleep(0.5)
        result.held_back = any("not claimed for: ['" in children.log(f"beat{n}") for n in range(1, opts.beats + 1))
        dead = children.dead()
        result.checks.append(
            (
                "beats and workers still running at the end",
                ", ".join(f"{n} exited {c}" for n, c in dead) or "yes",
                not dead,
            )
        )
    finally:
        children.stop_all()
        client.delete(*redis_list_keys(QUEUE))
    ledger_figures(result, tenant_ids, start, opts)
    return result


def batched_fields(opts: Options) -> dict:
    """The job fields that opt the bench's jobs into batching (as bench e2e sets them)."""
    return {"batch": True, "timeout_seconds": e2e.BATCHED_TIMEOUT_SECONDS} if opts.batch else {}


def beat_env(opts: Options) -> dict[str, str]:
    return {**e2e.child_env(), "CRONFLEET_RUN_BATCH_SIZE": str(opts.batch or 1)}


def finished(tenant_ids: list[int]) -> int:
    return JobRun.objects.filter(tenant_id__in=tenant_ids, finished_at__isnull=False).count()


def ledger_figures(result: Measured, tenant_ids: list[int], start: datetime, opts: Options) -> None:
    run = JobRun._meta.db_table
    width = opts.seconds / SLICES
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT state, split_part(reason, ':', 1), count(*) FROM {run} "
            "WHERE tenant_id = ANY(%s) GROUP BY 1, 2 ORDER BY 3 DESC",
            [tenant_ids],
        )
        result.states = {(state, reason): count for state, reason, count in cursor.fetchall()}
        lag = "extract(epoch FROM started_at - scheduled_at)"
        dlag = "extract(epoch FROM enqueued_at - scheduled_at)"
        cursor.execute(
            f"""
            SELECT count(*) FILTER (WHERE state = 'succeeded'),
                   count(DISTINCT (job_id, scheduled_at)), count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY {lag}),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY {lag}), max({lag}),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY {dlag}),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY {dlag}), max({dlag})
              FROM {run} WHERE tenant_id = ANY(%s)""",
            [tenant_ids],
        )
        succeeded, distinct, total, *lags = cursor.fetchone()
        cursor.execute(
            f"""
            SELECT floor(extract(epoch FROM scheduled_at - %(start)s) / %(width)s)::int AS slice, count(*),
                   count(*) FILTER (WHERE finished_at IS NOT NULL),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY {dlag}),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY {lag})
              FROM {run} WHERE tenant_id = ANY(%(tenants)s) GROUP BY 1 ORDER BY 1""",
            {"start": start, "width": width, "tenants": tenant_ids},
        )
        result.slices = [(n, done, d99, s99) for _, n, done, d99, s99 in cursor.fetchall()]
    result.finished = succeeded
    result.recorded = total
    if lags[0] is not None:
        result.start_lag = tuple(float(x) for x in lags[0:3])
    if lags[3] is not None:
        result.dispatch_lag = tuple(float(x) for x in lags[3:6])
    others = {key: n for key, n in result.states.items() if key[0] != "succeeded"}
    result.checks += [
        ("runs succeeded == fires expected", f"{succeeded:,}/{result.expected:,}", succeeded == result.expected),
        (
            "runs not succeeded (state: reason)",
            ", ".join(f"{n} {s}{': ' + r if r else ''}" for (s, r), n in others.items()) or "none",
            not others,
        ),
        ("one run per fire", f"{distinct:,} of {total:,}", distinct == total),
    ]


def report(w, opts: Options, results: list[Measured], broker: str) -> bool:
    every = interval(opts)
    rate = opts.jobs / every
    batching = f"batches of {opts.batch}" if opts.batch else "one run per message"
    w(
        f"bench steady: {opts.jobs:,} jobs every {every}s = {rate:,.0f} fires/s for {opts.seconds:g}s, {batching}; "
        f"{opts.workers} worker(s) x -c {opts.concurrency} -P {opts.pool}; broker {broker}; " + common.machine_line()
    )
    rows = []
    for r in results:
        rows.append(
            (
                r.label,
                f"{r.expected:,}",
                f"{r.finished:,}",
                "/".join(f"{x:.2f}" for x in r.dispatch_lag) if r.dispatch_lag else "-",
                "/".join(f"{x:.2f}" for x in r.start_lag) if r.start_lag else "-",
                common.num(r.machine_busy * 100 if r.machine_busy is not None else None) + "%",
            )
        )
    common.table(
        w,
        [
            "",
            "fires expected",
            "runs finished",
            "dispatch lag p50/p99/max s",
            "start lag p50/p99/max s",
            "machine busy",
        ],
        rows,
    )
    ours = results[-1]
    if ours.recorded is not None and ours.recorded < ours.expected:
        w(
            f"  cronfleet: {ours.expected - ours.recorded:,} of the fires expected were still due in the database, not "
            "claimed, when the beats stopped"
        )
    if ours.held_back:
        w(
            f"  cronfleet: backpressure engaged (a beat held the queue back at CRONFLEET_QUEUE_HIGH_WATER = "
            f"{app_settings.QUEUE_HIGH_WATER} messages); fires claimed later than the misfire grace "
            f"({app_settings.MISFIRE_GRACE_SECONDS} s) followed their misfire policy (run_once: coalesced)"
        )
    w("  CPU per run finished, microseconds (over the T seconds of load; CPU seconds in brackets)")
    names = []
    for r in results:
        names += [n for n in r.cpu if n not in names]
    common.table(
        w,
        ["", *[r.label.split(":")[0] for r in results]],
        [
            (
                name,
                *(
                    f"{r.cpu[name] / max(r.finished, 1) * 1e6:,.0f} ({r.cpu[name]:.1f})" if name in r.cpu else "-"
                    for r in results
                ),
            )
            for name in names
        ],
        indent="    ",
    )
    w("  (postgres: this database's backends; redis: the whole server, shared with other users of it)")
    if ours.slices:
        w(f"  cronfleet per tenth of T ({opts.seconds / SLICES:g}s each): a lag that grows is a rate not held")
        common.table(
            w,
            ["slice", "fires", "finished", "dispatch p99 s", "start p99 s"],
            [
                (str(i + 1), f"{n:,}", f"{done:,}", common.num(d, 2), common.num(s, 2))
                for i, (n, done, d, s) in enumerate(ours.slices)
            ],
            indent="    ",
        )
    p99 = ours.start_lag[1] if ours.start_lag else None
    held = p99 is not None and p99 <= TARGET["p99"] and ours.finished == ours.expected
    w(
        f"  target: {TARGET['rate']:,} fires/s for {TARGET['seconds']} s with p99 start lag <= {TARGET['p99']:g} s; "
        f"this run: {rate:,.0f} fires/s for {opts.seconds:g} s, p99 {common.num(p99, 2)} s: "
        + ("held" if held else "NOT held")
    )
    return common.print_checks(w, [c for r in results for c in r.checks])


def run(command, opts: Options) -> bool:
    note, client = command.note, command.redis
    results = []
    if opts.floor:
        results.append(measure_floor(opts, note, client))
    results.append(measure_cronfleet(opts, note, client))
    return report(command.stdout.write, opts, results, command.broker_label())
