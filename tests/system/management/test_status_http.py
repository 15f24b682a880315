"""`manage.py status` and the dashboard show each worker's HTTP attempts in flight, waiting
for a slot and the hosts saturated, summed over its pool processes by its heartbeat (issue
23 item 6). A real beat and prefork worker, started as the README starts it (no metrics
option), against a local receiver that holds every request until the test lets it go."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState
from tests.conftest import wait_for

RUNS = 6
PER_HOST = 2  # per pool process: with two processes at most 4 in flight, the rest wait


class HoldingReceiver:
    """Answers 200 to every request once `release` is set (or after 60 s)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.received = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.received += 1
                receiver.release.wait(60)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except BrokenPipeError:  # the worker gave up on it (its deadline, or it stopped)
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    made = HoldingReceiver()
    yield made
    made.close()


def workers_http() -> dict[str, dict]:
    out = StringIO()
    call_command("status", "--json", stdout=out)
    return {
        node["name"]: node.get("http")
        for node in json.loads(out.getvalue())["nodes"]
        if node["kind"] == "worker" and node.get("http")
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_status_and_the_dashboard_show_a_workers_http_attempts_in_flight(
    receiver, tenant, processes, queue_name, admin_client
):
    runs = []
    for n in range(RUNS):
        job = services.job_create(
            tenant,
            services.JobSpec(
                name=f"hook-{n}",
                target_kind="http",
                every=3600,
                queue=queue_name,
                timeout_seconds=60,
                http={"method": "POST", "url": receiver.url, "body": "{}"},
            ),
        )
        runs.append(services.job_trigger(job))
    env = {"CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8", "CRONFLEET_HTTP_IN_FLIGHT_PER_HOST": str(PER_HOST)}
    processes.worker(queue_name, concurrency=2, **env)
    processes.beat("beat", "--max-sleep", "1", **env)

    def all_held():
        found = workers_http()
        total = {key: sum(http[key] for http in found.values()) for key in ("in_flight", "waiting")}
        return found if total["in_flight"] and total["in_flight"] + total["waiting"] == RUNS else None

    found = wait_for(all_held, timeout=60, what="a heartbeat with every attempt in flight or waiting")
    ((name, http),) = found.items()
    text = StringIO()
    call_command("status", stdout=text)
    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()

    # A process with attempts waiting has its one host saturated.
    assert 0 < http["in_flight"] <= 2 * PER_HOST and http["hosts_saturated"] >= (1 if http["waiting"] else 0), http
    assert receiver.received == http["in_flight"]
    row = next(line for line in text.getvalue().splitlines() if line.startswith("worker") and name in line)
    assert f" {http['in_flight']} " in row.split("done")[1] and "http in flight" in text.getvalue()
    assert f'<td class="cf-http-in-flight">{http["in_flight"]}</td>' in html

    receiver.release.set()
    wait_for(
        lambda: JobRun.objects.filter(id__in=[r.id for r in runs], state=RunState.SUCCEEDED).count() == RUNS,
        timeout=60,
        what="every run to succeed once answered",
    )
    assert Job.objects.filter(tenant=tenant).count() == RUNS
