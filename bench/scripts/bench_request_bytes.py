#!/usr/bin/env python3
"""Measure the CPU a webhook attempt spends making its request's bytes on the worker's event
loop (scheduler_app/http/aclient.py's _message: the request line and headers checked and
merged, the signed headers, the body), for a typical call: a POST with two headers of the
job's own and the five signed ones. One core, no server, no database.

    .venv/bin/python bench/scripts/bench_request_bytes.py                        # this checkout
    .venv/bin/python bench/scripts/bench_request_bytes.py --root /tmp/old-tree    # beside another tree

With --root, each tree is timed in a process of its own, in turns (--rounds of each, each
round in the other order), so that both see the same machine; a round is the best of 3
repeats of --calls calls in microseconds a call, and each tree's median round is printed
with its rounds. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit
from pathlib import Path

import turns  # beside this script (bench/scripts/)

HERE = Path(__file__).resolve().parents[2]


def inner(calls: int) -> float:
    """The best of 3 repeats of `calls` messages, in microseconds a message (this tree)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-secret-key-0123456789abcdef0123456789")
    import django

    django.setup()
    from scheduler_app.http import aclient, signing
    from scheduler_app.http.call import Call

    call = Call(
        run_id=1,
        attempt=1,
        fire_key="job1@20261207T100000.000000Z",
        scheduled_at="2026-12-07T10:00:00+00:00",
        method="POST",
        url="http://127.0.0.1:8080/hook",
        host=("http", "127.0.0.1", 8080),
        path="/hook",
        headers={"Content-Type": "application/json", "X-Team": "ops"},
        body=b'{"hello": "world"}',
        secrets=(signing.parse_secret(signing.new_secret()),),
        timeout=30.0,
        max_response_bytes=65536,
        allowed_networks=(),
    )
    signed = call.signed_headers(time.time())
    return min(timeit.repeat(lambda: aclient._message(call, signed), number=calls, repeat=3)) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", help="another tree to time beside this one, in turns")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(f"{inner(args.calls):.3f}")
        return
    trees = {"this": HERE, **({"other": Path(args.root).resolve()} if args.root else {})}
    answers = turns.in_turns(Path(__file__).resolve(), trees, args.rounds, ["--calls", str(args.calls)])
    for name, lines in answers.items():
        figures = [float(line) for line in lines]
        print(
            f"{trees[name]}: median {statistics.median(figures):.2f} us a message ({', '.join(f'{f:.2f}' for f in figures)})"
        )


if __name__ == "__main__":
    main()
