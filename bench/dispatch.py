"""bench dispatch: N jobs whose next fire is one real instant S, K `runbeat` processes, no
worker; the seconds from S until the ledger holds N queued runs and Redis N messages.

The jobs are seeded with COPY before S: each fires every day (an interval of 86,400 s
anchored at S), once at S (a one-off), or by a daily cron at S (whole minutes only), so S
is a real fire time of every one of them and nothing is moved at the spike: the beats,
asleep until the earliest next_run_at, wake at S by their own deadline as they would at
midnight. The set-up (seeding, ANALYZE, the beats' start-up) must end before S
(--lead); a set-up that overran fails the check instead of being measured.

The beats run with the configured misfire grace unless --grace says otherwise, and the
bench never hides what it does: a fire claimed later than the grace follows its job's
misfire policy, and every run not recorded `queued` (with its state and reason) is
printed and fails the check. No worker drains the queue, so the beats run with
backpressure off and a dispatch timeout longer than the bench (their recovery sweep would
otherwise publish again runs older than it). Fires recorded later than the grace are counted and printed
(with run_once, the seeded jobs' policy unless --misfire-policy says otherwise, such a
fire still runs: its one missed fire is the latest).

The floor, in the same command: one process doing the essential writes of the same fires
in batches of the same size, nothing else: the product's own INSERT of the runs and
UPDATE of next_run_at (sql.INSERT_RUNS_PG, sql.ADVANCE_JOBS_PG) in one transaction a
batch, then a pipelined LPUSH of a copy of a real message per run; no claim, no plan, no
message building.

Each phase, the spike and the floor, begins right after a CHECKPOINT (where the role may
issue one), and the WAL each wrote is printed: PostgreSQL begins a checkpoint every so much
WAL, and one that the phase before brought on in the middle of one phase and not of the
other tilts that round's share.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from bench import common
from scheduler_app.conf import app_settings
from scheduler_app.dispatch import laps, sql
from scheduler_app.dispatch.plan import RunRow, advance_params, insert_params
from scheduler_app.models import Job, JobRun, RunState, db_now

QUEUE = "bench"
TENANTS = 10
TASK = "scheduler_app.echo"
DAY = 86400
POLL_SECONDS = 0.05
START_TIMEOUT = 120.0  # seconds a beat may take to complete its first turn
STARTED_LINE = "runbeat: started"
FLOOR_QUEUE = "bench-floor-dispatch"
TARGET = {"jobs": 1_000_000, "beats": 2, "seconds": 100.0, "rss_mib": 150.0, "startup": 2.0}


@dataclass
class Options:
    jobs: int
    beats: int = 1
    batch_size: int = 1000
    timeout: float = 300.0
    schedule: str = "interval"  # interval | once | cron
    lead: float | None = None  # seconds from the start of seeding to S; None: from N
    grace: int | None = None  # the beats' CRONFLEET_MISFIRE_GRACE_SECONDS; None: the setting's
    floor_jobs: int = 100_000  # fires the floor writes (at most N); 0: no floor
    misfire_policy: str = "run_once"  # the seeded jobs'
    repeat: int = 1  # spikes one after the other, each reported with its floor; then the medians


@dataclass
class BeatFigures:
    number: int
    started: float | None = None  # spawn -> "runbeat: started"
    ready: float | None = None  # spawn -> its first turn completed (the alive file)
    rss_ready_kb: int | None = None
    peak_rss_kb: int | None = None
    turns: int = 0
    published: int = 0
    exit_code: int | None = None
    steps: dict[str, float] = field(default_factory=dict)  # seconds per turn step (dispatch/laps.py)
    step_turns: int = 0  # the turns those seconds are over (every turn, idle ones too)


@dataclass
class Outcome:
    """What one dispatch run measured (the peers scenario prints it beside its peers)."""

    jobs: int
    beats: list[BeatFigures] = field(default_factory=list)
    seed_seconds: float = 0.0
    spike: datetime | None = None
    seconds: float | None = None  # S -> N queued runs and N messages
    last_recorded: float | None = None  # S -> the last run's enqueued_at (database clock)
    messages: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    machine_busy: float | None = None
    states: dict[tuple[str, str], int] = field(default_factory=dict)  # (state, reason) -> runs
    late: int = 0  # runs recorded later than the grace after their fire
    distinct: int = 0
    off_spike: int = 0  # runs whose scheduled_at is not S
    checks: list[tuple[str, str, bool]] = field(default_factory=list)
    floor: tuple[int, float] | None = None  # (fires, seconds)
    checkpointed: bool = False  # each phase began right after a CHECKPOINT (common.checkpoint)
    wal_bytes: int | None = None  # WAL written from just before S to all enqueued
    floor_wal_bytes: int | None = None  # WAL the floor wrote

    window: float = 0.0  # seconds watched: to all enqueued, or the timeout
    queued: int = 0

    @property
    def rate(self) -> float | None:
        """Fires/s: N over the seconds to all; after a timeout, the runs queued within it."""
        if self.seconds:
            return self.jobs / self.seconds
        return self.queued / self.window if self.window else None


def auto_lead(jobs: int) -> float:
    """Seconds from the start of seeding to the spike: the COPY at 25,000 jobs/s (it does
    ~70,000 on a quiet 2-core machine), the beats' start-up, and room to spare."""
    return 15.0 + jobs / 25_000


def beat_env(grace: int | None, timeout: float) -> dict[str, str]:
    env = common_env()
    # No worker drains the queue here: the bench measures how fast beats fill it, so
    # backpressure (which would stop them at the high-water mark) is off, and so is the
    # republish of runs no worker started within the dispatch timeout (300 s): in a run
    # longer than that it published the first runs again (39,000 extra messages in a
    # 400 s run), which no worker would have run twice but which are not fires.
    env["CRONFLEET_QUEUE_HIGH_WATER"] = "0"
    env["CRONFLEET_DISPATCH_TIMEOUT_SECONDS"] = str(int(timeout) + 3600)
    if grace is not None:
        env["CRONFLEET_MISFIRE_GRACE_SECONDS"] = str(grace)
    return env


def common_env() -> dict[str, str]:
    """A child's environment: production-like (debug off), unbuffered output."""
    from bench.e2e import child_env

    return child_env()


def start_beats(children: common.Children, count: int, batch_size: int, env: dict[str, str]) -> None:
    for number in range(1, count + 1):
        alive = children.folder / f"beat{number}.alive"
        children.start(
            f"beat{number}",
            [
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "runbeat",
                "--batch-size",
                str(batch_size),
                "--alive-file",
                str(alive),
            ],
            env,
        )


def wait_ready(children: common.Children, count: int) -> list[BeatFigures]:
    """Until every beat has completed its first turn (its alive file exists); their start-up."""
    figures = [BeatFigures(n) for n in range(1, count + 1)]
    deadline = time.monotonic() + START_TIMEOUT
    while any(b.ready is None for b in figures):
        for beat in figures:
            name = f"beat{beat.number}"
            if beat.started is None and STARTED_LINE in children.log(name):
                beat.started = time.monotonic() - children.spawned[name]
            if beat.ready is None and (children.folder / f"{name}.alive").exists():
                beat.ready = time.monotonic() - children.spawned[name]
                beat.rss_ready_kb = common.status_kb(children.pids(name)[0], "VmRSS")
        if children.dead() or time.monotonic() > deadline:
            name = children.dead()[0][0] if children.dead() else "beat1"
            raise RuntimeError(f"bench: {name} did not start:\n{children.log(name)[-3000:]}")
        time.sleep(0.01)
    return figures


TURN_LINE = re.compile(r"beat turn: claimed (\d+) jobs, published (\d+) runs")


def read_turns(children: common.Children, beat: BeatFigures) -> None:
    log = children.log(f"beat{beat.number}")
    for match in TURN_LINE.finditer(log):
        beat.turns += 1
        beat.published += int(match.group(2))
    told = laps.parse_line(log)  # the line a beat logs as it stops
    if told is not None:
        beat.step_turns, beat.steps = told


def redis_messages(client, queue: str) -> int:
    from scheduler_app.queues import redis_list_keys

    with client.pipeline(transaction=False) as pipe:
        for key in redis_list_keys(queue):
            pipe.llen(key)
        return sum(pipe.execute())


def schedule_fields(kind: str, spike: datetime) -> dict:
    """The job columns that make `spike` a real fire time (and the job's only one in a day)."""
    if kind == "interval":
        return {"every_seconds": DAY, "anchor_at": spike}
    if kind == "once":
        return {"run_at": spike}
    if kind == "cron":
        assert spike.second == 0 and spike.microsecond == 0
        return {"cron": f"{spike.minute} {spike.hour} * * *", "timezone": "UTC"}
    raise ValueError(kind)


def spike_instant(kind: str, lead: float) -> datetime:
    spike = common.next_whole_second(db_now(), lead)
    if kind == "cron" and spike.second:  # cron fires on whole minutes
        spike = spike.replace(second=0) + timedelta(minutes=1)
    return spike


def queued_runs(tenant_ids: list[int]) -> int:
    return JobRun.objects.filter(tenant_id__in=tenant_ids, state=RunState.QUEUED).count()


def ledger(tenant_ids: list[int], spike: datetime, grace: timedelta) -> tuple:
    run = JobRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT state, split_part(reason, ':', 1), count(*) FROM {run} "
            "WHERE tenant_id = ANY(%s) GROUP BY 1, 2 ORDER BY 3 DESC",
            [tenant_ids],
        )
        states = {(state, reason): count for state, reason, count in cursor.fetchall()}
        cursor.execute(
            f"""
            SELECT count(DISTINCT (job_id, scheduled_at)),
                   count(*) FILTER (WHERE scheduled_at <> %(spike)s),
                   count(*) FILTER (WHERE enqueued_at - scheduled_at > %(grace)s),
                   extract(epoch FROM max(enqueued_at) - %(spike)s)
              FROM {run} WHERE tenant_id = ANY(%(tenants)s)""",
            {"spike": spike, "grace": grace, "tenants": tenant_ids},
        )
        distinct, off_spike, late, last = cursor.fetchone()
    return states, distinct, off_spike, late, float(last) if last is not None else None


def measure(opts: Options, note, client, label: str = "dispatch") -> Outcome:
    """Seed, start the beats, wait for S, and measure until all N are enqueued."""
    out = Outcome(opts.jobs)
    grace = timedelta(seconds=opts.grace if opts.grace is not None else app_settings.MISFIRE_GRACE_SECONDS)
    lead = opts.lead if opts.lead is not None else auto_lead(opts.jobs)
    common.vacuum()  # before S is chosen: after a large clean-up it takes seconds
    spike = out.spike = spike_instant(opts.schedule, lead)
    tenant_ids = common.make_tenants(TENANTS, label)
    out.seed_seconds = common.seed_jobs(
        tenant_ids,
        opts.jobs,
        task_name=TASK,
        queue=QUEUE,
        next_run_at=spike,
        misfire_policy=opts.misfire_policy,
        **schedule_fields(opts.schedule, spike),
    )
    note(
        f"seeded {opts.jobs} jobs ({opts.schedule}, next fire {spike.isoformat()}) with COPY in "
        f"{out.seed_seconds:.1f}s ({opts.jobs / out.seed_seconds:,.0f} jobs/s)"
    )

    out.checkpointed = common.checkpoint()  # the seeding's WAL brings on no checkpoint in the spike
    children = common.Children()
    try:
        start_beats(children, opts.beats, opts.batch_size, beat_env(opts.grace, opts.timeout))
        out.beats = wait_ready(children, opts.beats)
        early = (spike - db_now()).total_seconds()
        note(
            f"{opts.beats} beat(s) ready: "
            + ", ".join(f"{b.ready:.2f}s" for b in out.beats)
            + f"; the spike in {early:.1f}s"
        )
        out.checks.append(("set-up done before the spike (--lead)", f"{early:.1f}s to spare", early > 0.2))
        if early <= 0.2:
            return out
        meter = common.CpuMeter({"beats": lambda: children.pids("beat")})
        wal_before = common.wal_position()
        common.sleep_until(spike - timedelta(seconds=0.1))
        meter.start()
        at_spike = common.sleep_until(spike)
        deadline = at_spike + opts.timeout
        next_check = at_spike + 1.0
        messages = 0
        while True:
            now = time.monotonic()
            messages = redis_messages(client, QUEUE)
            # Runs are committed before they are published: the queue can only lag the ledger.
            if messages >= opts.jobs and queued_runs(tenant_ids) >= opts.jobs:
                out.seconds = now - at_spike
                break
            if children.dead():
                name, code = children.dead()[0]
                note(f"{name} exited with {code}:\n{children.log(name)[-3000:]}")
                break
            if now > deadline:
                note(f"timeout after {opts.timeout:g}s: {messages} messages of {opts.jobs}")
                break
            if now >= next_check:
                # Done without N queued runs (fires recorded skipped, say): stop once no job
                # is due any more and every queued run is published, instead of at the timeout.
                next_check = now + 1.0
                if not Job.objects.filter(
                    tenant_id__in=tenant_ids, next_run_at__lte=spike
                ).exists() and messages >= queued_runs(tenant_ids):
                    note(
                        f"every job was dispatched after {now - at_spike:.1f}s, but only {messages} of "
                        f"{opts.jobs} runs were enqueued"
                    )
                    break
            meter.tick()
            time.sleep(POLL_SECONDS)
        meter.stop()
        out.wal_bytes = common.wal_since(wal_before)
        out.window = time.monotonic() - at_spike if out.seconds is None else out.seconds
        out.cpu, out.machine_busy = meter.used, meter.machine_busy
        for beat in out.beats:
            pids = children.pids(f"beat{beat.number}")
            beat.peak_rss_kb = common.status_kb(pids[0], "VmHWM") if pids else None
        for beat in out.beats:
            beat.exit_code = children.stop(f"beat{beat.number}", timeout=60)
            read_turns(children, beat)
    finally:
        children.stop_all()

    # Counted after the beats stopped, so a late duplicate would be seen too.
    out.states, out.distinct, out.off_spike, out.late, out.last_recorded = ledger(tenant_ids, spike, grace)
    out.messages = redis_messages(client, QUEUE)
    queued = out.queued = out.states.get((RunState.QUEUED.value, ""), 0)
    total = sum(out.states.values())
    not_queued = {key: count for key, count in out.states.items() if key != (RunState.QUEUED.value, "")}
    out.checks += [
        ("runs in ledger == N, all queued", f"{queued} of {total}", total == opts.jobs and queued == opts.jobs),
        (
            "runs not queued (state: reason)",
            ", ".join(f"{n} {s}{': ' + r if r else ''}" for (s, r), n in not_queued.items()) or "none",
            not not_queued,
        ),
        ("one run per fire: distinct (job, scheduled_at)", str(out.distinct), out.distinct == total),
        ("every run's fire time is the spike S", f"{out.off_spike} others", out.off_spike == 0),
        ("Redis messages == N", str(out.messages), out.messages == opts.jobs),
        ("all enqueued within --timeout", "yes" if out.seconds is not None else "no", out.seconds is not None),
        (
            "beats exited cleanly",
            " ".join(str(b.exit_code) for b in out.beats),
            all(b.exit_code == 0 for b in out.beats),
        ),
    ]
    if opts.floor_jobs and out.messages:  # also after a timeout: what this machine did meanwhile
        common.checkpoint()  # nor does the spike's WAL bring one on in the floor
        wal_before = common.wal_position()
        out.floor = floor(tenant_ids, min(opts.jobs, opts.floor_jobs), opts.batch_size, spike, client)
        out.floor_wal_bytes = common.wal_since(wal_before)
        note(f"floor: {out.floor[0]} fires in {out.floor[1]:.2f}s")
    return out


def floor(tenant_ids: list[int], fires: int, batch_size: int, spike: datetime, client) -> tuple[int, float]:
    """The essential writes of `fires` fires by one process in batches: the product's run
    INSERT and next_run_at UPDATE in one transaction a batch, then a pipelined LPUSH of a
    real message per run. Another fire time (S + 1 day) of the same jobs."""
    from scheduler_app.queues import redis_list_keys

    message = next(m for key in redis_list_keys(QUEUE) if (m := client.lindex(key, 0)) is not None)
    floor_key = redis_list_keys(FLOOR_QUEUE)[0]
    client.delete(floor_key)
    jobs = list(Job.objects.filter(tenant_id__in=tenant_ids).order_by("id").values_list("id", "tenant_id")[:fires])
    fire_at = spike + timedelta(days=1)
    after = fire_at + timedelta(days=1)
    started = time.monotonic()
    for start in range(0, len(jobs), batch_size):
        batch = jobs[start : start + batch_size]
        n = len(batch)
        with transaction.atomic(), connection.cursor() as cursor:
            now = db_now()
            cursor.execute(
                sql.INSERT_RUNS_PG,
                insert_params(
                    [
                        RunRow(job_id, tenant_id, fire_at, RunState.QUEUED.value, "", 1, 5)
                        for job_id, tenant_id in batch
                    ],
                    now,
                ),
            )
            cursor.fetchall()
            cursor.execute(sql.ADVANCE_JOBS_PG, advance_params([(job_id, after) for job_id, _ in batch]))
        with client.pipeline(transaction=False) as pipe:
            for _ in range(n):
                pipe.lpush(floor_key, message)
            pipe.execute()
    seconds = time.monotonic() - started
    client.delete(floor_key)
    return len(jobs), seconds


def report(out_write, opts: Options, out: Outcome, broker: str) -> bool:
    w = out_write
    grace = opts.grace if opts.grace is not None else app_settings.MISFIRE_GRACE_SECONDS
    w(
        f"bench dispatch: {opts.jobs:,} jobs due at one instant ({opts.schedule} schedules, a real fire time), "
        f"{opts.beats} beat(s), batch {opts.batch_size}, misfire grace {grace}s; broker {broker}, queue {QUEUE!r}; "
        + common.machine_line()
    )
    seconds = out.seconds
    fired = opts.jobs if out.seconds else max(out.queued, 1)
    per_fire = {name: cpu / fired * 1e6 for name, cpu in out.cpu.items()} if out.cpu else {}
    target = opts.jobs == TARGET["jobs"] and opts.beats == TARGET["beats"]
    peaks = [b.peak_rss_kb / 1024 for b in out.beats if b.peak_rss_kb is not None]
    peak = max(peaks) if peaks else None
    ready = max((b.ready or 0 for b in out.beats), default=0)
    rows = [
        (
            "seed with COPY: seconds, jobs/s",
            f"{out.seed_seconds:.1f}",
            f"{opts.jobs / out.seed_seconds:,.0f}" if out.seed_seconds else "-",
            ">= 50,000 jobs/s",
        ),
        (
            "seconds to enqueue all (S -> N queued + N in Redis)",
            common.num(seconds, 2),
            "",
            f"<= {TARGET['seconds']:g} s at 1,000,000 with 2 beats"
            + (f": {'met' if seconds is not None and seconds <= TARGET['seconds'] else 'MISSED'}" if target else ""),
        ),
        ("S -> last run recorded (ledger clock)", common.num(out.last_recorded, 2), "", ""),
        ("fires/s", common.num(out.rate), "", "" if out.seconds else f"{out.queued:,} queued in {out.window:.0f} s"),
        (
            "beat start-up: spawn -> first turn done, worst",
            f"{ready:.2f}",
            "",
            f"<= {TARGET['startup']:g} s: {'met' if ready <= TARGET['startup'] else 'MISSED'}",
        ),
        (
            "beat peak RSS MiB, largest",
            common.num(peak, 1),
            "",
            f"<= {TARGET['rss_mib']:g} MiB"
            + ("" if peak is None else f": {'met' if peak <= TARGET['rss_mib'] else 'MISSED'}"),
        ),
        (
            f"fires recorded later than the misfire grace ({grace}s)",
            f"{out.late:,}",
            "",
            f"followed their misfire policy ({opts.misfire_policy})" if out.late else "",
        ),
        (
            "machine CPU busy (all cores)",
            common.num(out.machine_busy * 100 if out.machine_busy is not None else None) + "%",
            "",
            "",
        ),
        (
            "WAL written, MB: the spike, the floor",
            common.num(out.wal_bytes / 1e6 if out.wal_bytes is not None else None),
            common.num(out.floor_wal_bytes / 1e6 if out.floor_wal_bytes is not None else None),
            "each begun after a CHECKPOINT" if out.checkpointed else "no CHECKPOINT before (the role may not)",
        ),
    ]
    if out.floor:
        fires, secs = out.floor
        floor_rate = fires / secs
        rows.append(
            (
                "floor: essential writes, one process, fires/s",
                f"{floor_rate:,.0f}",
                f"{fires:,} fires",
                f"cronfleet = {out.rate / floor_rate:.0%} of it" if out.rate else "",
            )
        )
    common.table(w, ["", "value", "", "target / note"], rows)
    w(f"  CPU per fire, microseconds (S -> all enqueued, or the timeout; over {fired:,} fires)")
    common.table(
        w,
        ["", "µs/fire", "CPU s"],
        [(name, f"{per_fire[name]:.0f}", f"{cpu:.1f}") for name, cpu in out.cpu.items()]
        + [
            (
                "beats + postgres + redis",
                f"{sum(per_fire.get(k, 0) for k in ('beats', 'postgres', 'redis')):.0f}",
                f"{sum(out.cpu.get(k, 0) for k in ('beats', 'postgres', 'redis')):.1f}",
            )
        ],
        indent="    ",
    )
    w("  (postgres: this database's backends; redis: the whole server, shared with other users of it)")
    w("  per beat")
    common.table(
        w,
        ["beat", "started s", "first turn s", "RSS ready MiB", "peak RSS MiB", "turns", "runs published"],
        [
            (
                str(b.number),
                common.num(b.started, 2),
                common.num(b.ready, 2),
                common.mib(b.rss_ready_kb),
                common.mib(b.peak_rss_kb),
                str(b.turns),
                f"{b.published:,}",
            )
            for b in out.beats
        ],
        indent="    ",
    )
    report_steps(w, out.beats)
    return common.print_checks(w, out.checks)


def report_steps(w, beats: list[BeatFigures]) -> None:
    """Where the beats' turns went, step by step (dispatch/laps.py), over their whole lives."""
    totals: dict[str, float] = {}
    for beat in beats:
        for step, seconds in beat.steps.items():
            totals[step] = totals.get(step, 0.0) + seconds
    turns = sum(beat.step_turns for beat in beats)
    if not totals or not turns:
        w("  turn steps: no beat told them (it did not stop cleanly)")
        return
    spent = sum(totals.values())
    w(f"  turn steps, all beats ({turns} turns, {spent:.2f} s in turns; idle turns included)")
    common.table(
        w,
        ["step", "seconds", "ms per turn", "share"],
        [
            (step, f"{seconds:.3f}", f"{seconds / turns * 1000:.3f}", f"{seconds / spent:.1%}")
            for step, seconds in sorted(totals.items(), key=lambda item: -item[1])
        ],
        indent="    ",
    )


def run(command, opts: Options) -> bool:
    client = command.redis
    ok, outcomes = True, []
    for number in range(1, opts.repeat + 1):
        if number > 1:
            command.note(f"round {number} of {opts.repeat}")
            command.clean()  # the last round's tenants, jobs and runs; the queues flushed
        outcome = measure(opts, command.note, client)
        ok = report(command.stdout.write, opts, outcome, command.broker_label()) and ok
        outcomes.append(outcome)
    if opts.repeat > 1:
        report_rounds(command.stdout.write, outcomes)
    return ok


def report_rounds(w, outcomes: list[Outcome]) -> None:
    """The rounds' rates beside their floors, and the medians."""
    rates = [out.rate for out in outcomes if out.rate]
    floors = [fires / secs for out in outcomes if out.floor for fires, secs in [out.floor]]
    shares = [out.rate / (out.floor[0] / out.floor[1]) for out in outcomes if out.rate and out.floor]
    w(f"bench dispatch: {len(outcomes)} rounds")
    if rates:
        w(f"  median fires/s {statistics.median(rates):,.0f}  (rounds: {', '.join(f'{r:,.0f}' for r in rates)})")
    if floors:
        w(
            f"  median floor fires/s {statistics.median(floors):,.0f}  (rounds: {', '.join(f'{f:,.0f}' for f in floors)})"
        )
    if shares:
        w(
            f"  cronfleet / floor: median {statistics.median(shares):.0%}  "
            f"(rounds: {', '.join(f'{s:.0%}' for s in shares)}; lowest {min(shares):.0%})"
        )
