"""Helpers for the observability tests: free loopback ports, a real worker with extra
options, and reading a Prometheus exposition."""

from __future__ import annotations

import socket
import sys
import urllib.request
import uuid

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Processes, wait_for


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (the kernel's choice), for processes started next."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def start_worker(
    processes: Processes,
    queue: str,
    name: str,
    *options: str,
    concurrency: int = 2,
    heartbeat: bool = False,
    **env: str,
):
    """A real Celery worker like Processes.worker, with more command-line options (and event
    heartbeats, which tell Flower the worker is online, with `heartbeat`)."""
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "project",
        "worker",
        "-Q",
        queue,
        "-c",
        str(concurrency),
        "-n",
        f"{name}-{uuid.uuid4().hex[:6]}@%h",
        "--without-mingle",
        "--without-gossip",
        *([] if heartbeat else ["--without-heartbeat"]),
        "-l",
        "info",
        *options,
    ]
    proc = processes.start(name, argv, **env)
    wait_for(lambda: "ready." in processes.log(name) or proc.poll() is not None, timeout=60, what=f"{name} ready")
    assert proc.poll() is None, processes.log(name)
    return proc


def scraped(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of a Prometheus exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return scraped(response.read().decode())


def total(found: dict, name: str, **labels) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    return sum(
        value
        for (sample_name, sample_labels), value in found.items()
        if sample_name == name and labels.items() <= dict(sample_labels).items()
    )
