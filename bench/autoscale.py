"""bench autoscale: the midnight spike with workers scaled from the forecast, beside workers
scaled on queue depth alone, and the floor of enough workers started before it.

N one-off jobs fall due at one instant S (--lead seconds after the seed), each a run of
scheduler_app.sleep for D seconds (--duration) on the queue bench-autoscale; each job has one
earlier run of D seconds, so the forecast knows its duration as it would after a day. One beat.
Real Celery workers (-P threads -c C) start at one, and every STEP seconds a controller sets
their number between one and --max-workers (M):

- forecast: observability.forecast.compute(now).workers for the queue, the value /metrics
  exports as cronfleet_forecast_workers (this process's settings: target lag --target-lag,
  concurrency C);
- queue depth: ceil((the queue's runs queued or running) / C), the most a queue-length scaler
  could see (KEDA's Redis list scaler reads only the broker's list, which misses the
  messages workers have already reserved);
- fixed: M workers from the start, the floor (no scaling at all, the most it can cost).

A worker asked to go (two steps in a row above the target, the same for each controller) gets
SIGTERM and finishes its runs. Printed per controller: the spike's start lag (started_at -
scheduled_at) p50, p99 and max, the peak of live workers, worker-seconds (live workers summed
over each step, from the seed to the last run's end: what the fleet cost) and when the
controller first asked for more than one worker, relative to S.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection
from django.test import override_settings

from bench import common, e2e
from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from scheduler_app.observability import forecast
from scheduler_app.queues import queue_name, redis_list_keys

QUEUE = "bench-autoscale"
TASK = "scheduler_app.sleep"
STEP = 2.0  # seconds between two decisions of a controller
COOL_DOWN_STEPS = 2  # steps in a row above the target before a worker is asked to go
CONTROLLERS = ("fixed", "forecast", "queue depth")


@dataclass
class Options:
    jobs: int
    duration: float = 2.0
    max_workers: int = 4
    concurrency: int = 4
    lead: float = 90.0
    target_lag: float = 10.0
    timeout: float = 300.0
    pool: str = "threads"  # e2e.start_worker reads it


@dataclass
class Measured:
    controller: str
    finished: int = 0
    lag: tuple[float, float, float] | None = None  # p50, p99, max
    peak_workers: int = 0
    worker_seconds: float = 0.0
    first_scale_up: float | None = None  # seconds from S the controller first asked for 2+
    checks: list[tuple[str, str, bool]] = field(default_factory=list)


def seed(opts: Options) -> tuple[int, object]:
    """The tenant, its N jobs due at S, and one earlier finished run of each; (tenant id, S)."""
    tenant = Tenant.objects.create(slug=f"{common.PREFIX}autoscale-{uuid.uuid4().hex[:6]}", name="Bench autoscale")
    spike = db_now().replace(microsecond=0) + timedelta(seconds=opts.lead)
    jobs = Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"spike-{i}",
            task_name=TASK,
            kwargs={"seconds": opts.duration},
            queue=QUEUE,
            run_at=spike,
            next_run_at=spike,
        )
        for i in range(opts.jobs)
    )
    before = spike - timedelta(days=1)
    JobRun.objects.bulk_create(
        JobRun(
            job=job,
            tenant=tenant,
            scheduled_at=before,
            created_at=before,
            state=RunState.SUCCEEDED,
            started_at=before,
            finished_at=before + timedelta(seconds=opts.duration),
        )
        for job in jobs
    )
    return tenant.id, spike


def target(controller: str, opts: Options, tenant_id: int) -> int:
    """The workers `controller` asks for now, between one and M."""
    if controller == "fixed":
        wanted = opts.max_workers
    elif controller == "forecast":
        wanted = forecast.compute(db_now()).workers.get(queue_name(QUEUE), 0)
    else:
        waiting = JobRun.objects.filter(tenant_id=tenant_id, state__in=(RunState.QUEUED, RunState.RUNNING)).count()
        wanted = math.ceil(waiting / opts.concurrency)
    return max(1, min(opts.max_workers, wanted))


class Fleet:
    """The real worker processes one controller scales."""

    def __init__(self, children: common.Children, opts: Options) -> None:
        self.children, self.opts = children, opts
        self.started = 0
        self.live: list[str] = []  # child names, oldest first
        self.above = 0  # steps in a row with more workers than the target

    def scale_to(self, wanted: int) -> None:
        self.live = [name for name in self.live if self.children.pids(name)]
        while len(self.live) < wanted:
            e2e.start_worker(self.children, "project", QUEUE, self.started, self.opts)
            self.live.append(f"project-worker{self.started}")
            self.started += 1
        self.above = self.above + 1 if len(self.live) > wanted else 0
        if self.above >= COOL_DOWN_STEPS:  # one at a time, the newest first
            name = self.live.pop()
            self.children.send_signal(name)
            self.above = 0

    def alive(self) -> int:
        return len(self.children.pids("worker"))


def measure(controller: str, opts: Options, note: Callable[[str], None]) -> Measured:
    result = Measured(controller)
    tenant_id, spike = seed(opts)
    children = common.Children()
    try:
        children.start("beat", e2e.beat_argv(), e2e.child_env())
        fleet = Fleet(children, opts)
        fleet.scale_to(1)
        note(f"autoscale {controller}: {opts.jobs} jobs due at {spike:%H:%M:%S}; one beat, one worker")
        deadline = time.monotonic() + opts.lead + opts.timeout
        with override_settings(
            CRONFLEET_FORECAST_TARGET_LAG_SECONDS=opts.target_lag,
            CRONFLEET_FORECAST_WORKER_CONCURRENCY=opts.concurrency,
            CRONFLEET_FORECAST_CACHE_SECONDS=0,
        ):
            while time.monotonic() < deadline:
                step_started = time.monotonic()
                wanted = target(controller, opts, tenant_id)
                if wanted > 1 and result.first_scale_up is None:
                    result.first_scale_up = (db_now() - spike).total_seconds()
                fleet.scale_to(wanted)
                alive = fleet.alive()
                result.peak_workers = max(result.peak_workers, alive)
                result.worker_seconds += alive * STEP
                if db_now() > spike and not e2e.work_left([tenant_id]):
                    break
                time.sleep(max(0.0, STEP - (time.monotonic() - step_started)))
    finally:
        children.stop_all()
    return ledger_figures(result, tenant_id, spike, opts)


def ledger_figures(result: Measured, tenant_id: int, spike, opts: Options) -> Measured:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT count(*) FILTER (WHERE state = 'succeeded'), count(DISTINCT job_id),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - scheduled_at)),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - scheduled_at)),
                   max(extract(epoch FROM started_at - scheduled_at))
              FROM {JobRun._meta.db_table} WHERE tenant_id = %s AND scheduled_at = %s
        """,
            [tenant_id, spike],
        )
        succeeded, jobs, p50, p99, worst = cursor.fetchone()
    result.finished = succeeded
    result.lag = (float(p50 or 0), float(p99 or 0), float(worst or 0)) if succeeded else None
    result.checks += [
        (f"{result.controller}: the spike's runs succeeded", f"{succeeded}/{opts.jobs}", succeeded == opts.jobs),
        (f"{result.controller}: one run per job", f"{jobs}", jobs == opts.jobs),
    ]
    return result


def report(out: Callable[[str], None], opts: Options, results: list[Measured]) -> bool:
    out(
        f"bench autoscale: {opts.jobs} runs of {opts.duration:g} s due at one instant; workers -P threads "
        f"-c {opts.concurrency}, 1 to {opts.max_workers}; forecast target lag {opts.target_lag:g} s; "
        f"a decision every {STEP:g} s"
    )
    out(common.machine_line())
    common.table(
        out,
        ["controller", "start lag p50", "p99", "max", "peak workers", "worker-seconds", "first scale-up (s from S)"],
        [
            [
                r.controller,
                *(common.num(v, 2) for v in (r.lag or (None, None, None))),
                str(r.peak_workers),
                common.num(r.worker_seconds),
                common.num(r.first_scale_up, 1) if r.first_scale_up is not None else "never",
            ]
            for r in results
        ],
    )
    return common.print_checks(out, [check for r in results for check in r.checks])


def run(command, opts: Options) -> bool:
    command.extra_queues.append(QUEUE)
    results = []
    for controller in CONTROLLERS:
        command.clean()
        command.redis.delete(*redis_list_keys(QUEUE))
        results.append(measure(controller, opts, command.note))
    return report(command.stdout.write, opts, results)
