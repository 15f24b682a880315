#!/usr/bin/env python3
"""Scale a queue's workers to Cronfleet's forecast (docs/autoscaling.md).

Reads cronfleet_forecast_workers{queue=...} from Cronfleet's /metrics (--metrics-url) or from
a Prometheus server's HTTP API (--prometheus), bounds it by --min and --max, and prints it or
runs --run with {n} replaced by it, once (--once) or every --interval seconds. Standard
library only: no Django, no Cronfleet import.

    python3 deploy/autoscale.py --metrics-url http://web:8000/metrics --queue cronfleet \\
        --min 1 --max 20 --run "docker compose up -d --no-recreate --scale worker={n}"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.parse
import urllib.request

METRIC = "cronfleet_forecast_workers"
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


class Unreadable(Exception):
    pass


def from_metrics_text(text: str, queue: str) -> float:
    """The forecast's workers for `queue` in a Prometheus text exposition."""
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or match["name"] != METRIC:
            continue
        labels = {label["key"]: label["value"] for label in LABEL.finditer(match["labels"] or "")}
        if labels.get("queue") == queue:
            return float(match["value"])
    raise Unreadable(f"no {METRIC}{{queue={queue!r}}} in the metrics (is the queue's name right?)")


def from_prometheus(answer: dict, queue: str) -> float:
    """The largest value of an instant query's answer (several web replicas give one each)."""
    results = answer.get("data", {}).get("result", [])
    if answer.get("status") != "success" or not results:
        raise Unreadable(f"Prometheus has no {METRIC}{{queue={queue!r}}}: {json.dumps(answer)[:200]}")
    return max(float(result["value"][1]) for result in results)


def fetch(url: str, token: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def read_workers(options: argparse.Namespace) -> float:
    if options.metrics_url:
        return from_metrics_text(fetch(options.metrics_url, options.token, options.timeout).decode(), options.queue)
    query = urllib.parse.urlencode({"query": f'{METRIC}{{queue="{options.queue}"}}'})
    url = f"{options.prometheus.rstrip('/')}/api/v1/query?{query}"
    return from_prometheus(json.loads(fetch(url, options.token, options.timeout)), options.queue)


def bounded(workers: float, options: argparse.Namespace) -> int:
    n = max(options.min, int(workers))
    return n if options.max is None else min(options.max, n)


def step(options: argparse.Namespace) -> int:
    """One reading and, when --run is given, one run of the command; the count."""
    n = bounded(read_workers(options), options)
    if options.run:
        command = [part.replace("{n}", str(n)) for part in shlex.split(options.run)]
        subprocess.run(command, check=True)
    print(n, flush=True)
    return n


def non_negative(kind):
    def parse(text: str):
        value = kind(text)
        if value < 0:
            raise ValueError(text)
        return value

    parse.__name__ = f"non-negative {kind.__name__}"
    return parse


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = found.add_mutually_exclusive_group(required=True)
    source.add_argument("--metrics-url", help="Cronfleet's /metrics, e.g. http://web:8000/metrics")
    source.add_argument("--prometheus", help="a Prometheus server, e.g. http://prometheus:9090")
    found.add_argument("--queue", default="cronfleet", help="the queue whose workers to scale (default: cronfleet)")
    found.add_argument(
        "--token",
        default=os.environ.get("CRONFLEET_METRICS_TOKEN", ""),
        help="bearer token for the URL (default: $CRONFLEET_METRICS_TOKEN)",
    )
    found.add_argument("--min", type=non_negative(int), default=0, help="fewest workers (default 0)")
    found.add_argument("--max", type=non_negative(int), default=None, help="most workers (default: no bound)")
    found.add_argument("--run", help="command to run with {n} replaced by the count; without it, print the count")
    found.add_argument("--once", action="store_true", help="read and act once, then exit")
    found.add_argument("--interval", type=non_negative(float), default=30.0, help="seconds between readings")
    found.add_argument("--timeout", type=non_negative(float), default=10.0, help="seconds an HTTP request may take")
    return found


def check(found: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    for flag, url in (("--metrics-url", options.metrics_url), ("--prometheus", options.prometheus)):
        if url is not None and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            found.error(f"argument {flag}: must be an http:// or https:// URL, not {url!r}")
    if options.max is not None and options.max < options.min:
        found.error(f"argument --max: {options.max} is below --min {options.min}")
    if options.run is not None and "{n}" not in options.run:
        found.error("argument --run: the command must contain {n}, the worker count")
    if not options.once and options.interval <= 0:
        found.error("argument --interval: must be above 0 without --once")


def main(argv: list[str] | None = None) -> int:
    found = parser()
    options = found.parse_args(argv)
    check(found, options)
    while True:
        try:
            step(options)
        except (OSError, ValueError, Unreadable, subprocess.CalledProcessError) as exc:
            print(f"autoscale: {exc}", file=sys.stderr, flush=True)
            if options.once:
                return 1
        if options.once:
            return 0
        time.sleep(options.interval)


if __name__ == "__main__":
    sys.exit(main())
