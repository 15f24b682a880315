#!/usr/bin/env python3
"""Measure the worker's CPU per webhook run in each step of worker/flight.py, one group of
--group runs at a time against a real PostgreSQL (DATABASE_URL): the start statement
(execution.start_runs), each run's Call (Flight._prepare), the answer read (answer()), the
end statement (Flight._end: endings, write_endings, metrics), and on the event loop's side
the signed headers and the request's bytes. No receiver and no broker: the figures are the
Python CPU of this thread (time.thread_time), in microseconds a run, the median of --rounds
groups, beside another tree's with --root (each tree in a process of its own, in turns).

    DATABASE_URL=postgres://... .venv/bin/python bench/scripts/bench_flight_steps.py
    DATABASE_URL=postgres://... .venv/bin/python bench/scripts/bench_flight_steps.py --root /tmp/old-tree

It seeds one tenant and --group x --rounds HTTP jobs with a queued run each (rows named
bench-steps-*) and deletes them at the end. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path

import turns  # beside this script (bench/scripts/)

HERE = Path(__file__).resolve().parents[2]
STEPS = ("start", "prepare", "sign+bytes", "answer", "end")


def inner(group: int, rounds: int) -> dict[str, float]:
    """Each step's median microseconds a run over `rounds` groups (this tree)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-secret-key-0123456789abcdef0123456789")
    import django

    django.setup()
    from django.utils import timezone

    from scheduler_app.http import aclient
    from scheduler_app.http.client import HttpResult
    from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
    from scheduler_app.targets.http import answer
    from scheduler_app.worker import execution
    from scheduler_app.worker.flight import Flight, _Attempt, _Finished

    tenant = Tenant.objects.create(slug=f"bench-steps-{uuid.uuid4().hex[:8]}", name="bench steps")
    now = db_now()
    jobs = Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"bench-steps-{i}",
            target_kind="http",
            timeout_seconds=10,
            target_config={
                "method": "POST",
                "url": f"http://127.0.0.1:8080/hook/{i}",
                "headers": {},
                "body": json.dumps({"job": i}),
            },
        )
        for i in range(group * rounds)
    )
    runs = JobRun.objects.bulk_create(
        JobRun(job=job, tenant=tenant, scheduled_at=now, created_at=now, enqueued_at=now, state=RunState.QUEUED)
        for job in jobs
    )
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    flight = Flight()
    ok = HttpResult(
        status=200, headers={"content-type": "application/json"}, body=b'{"ok": true}', truncated=False, elapsed=0.1
    )

    def timed(step: str, fn, *args):
        begun = time.thread_time()
        value = fn(*args)
        times[step].append((time.thread_time() - begun) / group * 1e6)
        return value

    def start(pairs):
        return execution.start_runs(pairs, worker="bench-steps", task_id="t")

    def messages(calls):
        return [aclient._message(c, c.signed_headers(time.time())) for c in calls]

    def answers(calls):
        return [answer(c, ok, timezone.now) for c in calls]

    try:
        for r in range(rounds):
            pairs = [(run.id, 1) for run in runs[r * group : (r + 1) * group]]
            started = timed("start", start, pairs)
            calls = timed("prepare", flight._prepare, started)
            timed("sign+bytes", messages, calls)
            results = timed("answer", answers, calls)
            finished = [
                _Finished(_Attempt(s, c, 0.0, "bench"), result=res, seconds=0.1)
                for s, c, res in zip(started, calls, results, strict=True)
            ]
            flight._pending = len(finished)
            timed("end", flight._end, finished)
    finally:
        JobRun.objects.filter(tenant=tenant).delete()
        Job.objects.filter(tenant=tenant).delete()
        tenant.delete()
    return {step: statistics.median(values) for step, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", type=int, default=100, help="runs a group (CRONFLEET_RUN_BATCH_SIZE's default)")
    parser.add_argument("--rounds", type=int, default=30, help="groups timed in each process")
    parser.add_argument("--turns", type=int, default=3, help="processes a tree, in turns with --root's")
    parser.add_argument("--root", help="another checkout to time beside this one")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(inner(args.group, args.rounds)))
        return
    trees = {"this": HERE, **({"other": Path(args.root).resolve()} if args.root else {})}
    answers = turns.in_turns(
        Path(__file__).resolve(), trees, args.turns, ["--group", str(args.group), "--rounds", str(args.rounds)]
    )
    seen = {name: [json.loads(answer) for answer in lines] for name, lines in answers.items()}
    print(
        f"worker CPU a webhook run, microseconds (median of {args.turns} processes x {args.rounds} groups of {args.group})"
    )
    print(f"  {'tree':<8}" + "".join(f"{step:>12}" for step in STEPS) + f"{'total':>10}")
    for name, figures in seen.items():
        row = {step: statistics.median(f[step] for f in figures) for step in STEPS}
        print(f"  {name:<8}" + "".join(f"{row[step]:>12.1f}" for step in STEPS) + f"{sum(row.values()):>10.1f}")


if __name__ == "__main__":
    main()
