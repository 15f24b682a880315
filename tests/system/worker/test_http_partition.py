"""Faults of a worker with HTTP runs in flight, with real beats, workers and a receiver.

A worker killed with runs in flight costs them one lease: each is retried as its next
attempt with the same fire key as `webhook-id`, and ends once.

A worker cut off from the database mid-group must not call a target after the run's next
attempt started elsewhere (issue: five targets got attempt 1 after attempt 2 succeeded).

Worker A reaches PostgreSQL through a TCP proxy this test pauses (its connections stay open
and silent: a partition, not a refusal). A's group of HTTP runs is called one at a time by a
receiver that answers after a second; once the proxy stops, A's lease renewals hang, a beat
(direct) takes the runs as lost and worker B (direct) calls them as attempt 2. The receiver's
log must show no attempt 1 of a fire arriving after that fire's attempt 2 did, for runs in
flight (worker/flight.py). (A group run in turn stops by itself here: its next end write
hangs on the cut connection within a second, before its lease could run out.)
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scheduler_app import services
from scheduler_app.models import Job, JobRun, db_now
from tests.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
FAST = {
    "CRONFLEET_LEASE_SECONDS": "4",
    "CRONFLEET_HEARTBEAT_SECONDS": "1",
    "CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8",
}


class PausableProxy:
    """Forwards TCP to PostgreSQL until pause(): then it forwards nothing, closing nothing.
    close() ends every connection it holds, so no session of the test outlives it (one left
    open would keep the test database from being dropped at the end of the run)."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.flowing = threading.Event()
        self.flowing.set()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # paused: hold what came, say nothing
                sink.sendall(data)
        except OSError:
            pass
        finally:  # one side gone: end the other, as a connection through no proxy would
            for end in (source, sink):
                # shutdown() first, as in close(): the other pipe thread may be blocked in recv()
                # on `end`, and a close() alone would leave PostgreSQL's session open.
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def close(self) -> None:
        self.flowing.set()
        for end in self.sockets:
            # shutdown() first: close() alone leaves the connection open while a pipe thread is
            # blocked in recv() on it, and PostgreSQL keeps the session.
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def pause(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()


class SlowReceiver:
    """Answers each webhook after `seconds` (`first_seconds` for attempt 1); logs (fire key,
    attempt, arrival time)."""

    def __init__(self, seconds: float, first_seconds: float | None = None) -> None:
        self.arrivals: list[tuple[str, int, float]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                attempt = int(self.headers["cronfleet-attempt"])
                receiver.arrivals.append((self.headers["webhook-id"], attempt, time.monotonic()))
                time.sleep(first_seconds if attempt == 1 and first_seconds is not None else seconds)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # hundreds connect at once
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def test_a_cut_off_worker_calls_no_target_after_its_successor_started(processes, tenant, queue_name, settings, request):
    from django.db import connection

    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the loopback receiver, when saved too
    receiver = SlowReceiver(1.0)
    proxy = PausableProxy(int(connection.settings_dict["PORT"] or 5432))
    request.addfinalizer(proxy.close)
    db = connection.settings_dict
    through_proxy = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
    jobs = [
        services.job_create(
            tenant,
            services.JobSpec(
                name=f"slow-{number}",
                target_kind="http",
                every=3600,
                queue=queue_name,
                max_attempts=3,
                retry_backoff_seconds=1,
                timeout_seconds=30,
                http={"method": "POST", "url": receiver.url, "body": "{}"},
            ),
        )
        for number in range(12)
    ]
    cut_off = processes.worker(
        queue_name, name="cut-off", concurrency=1, DATABASE_URL=through_proxy, CRONFLEET_HTTP_IN_FLIGHT="2", **FAST
    )
    processes.beat("beat", "--max-sleep", "1", **FAST)
    Job.objects.filter(id__in=[job.id for job in jobs]).update(next_run_at=db_now())
    services.wake_beats()
    wait_for(lambda: len(receiver.arrivals) >= 2, timeout=30, what="worker A calling its group")

    proxy.pause()
    paused_at = time.monotonic()
    processes.worker(queue_name, name="successor", **FAST)
    # Until the successor has ended every run A did not: A, still cut off, has had all that
    # time to call what it still holds.
    wait_for(
        lambda: JobRun.objects.filter(job__in=jobs, state="succeeded").count() == len(jobs),
        timeout=90,
        what="every run succeeded, by A before the partition or by the successor after",
    )
    proxy.resume()

    second = {key: at for key, attempt, at in receiver.arrivals if attempt == 2}
    late = [
        (key, at - second[key])
        for key, attempt, at in receiver.arrivals
        if attempt == 1 and key in second and at > second[key]
    ]
    assert late == [], f"attempt 1 reached the target after attempt 2 did: {late}"
    first_after_pause = [at - paused_at for _, attempt, at in receiver.arrivals if attempt == 1 and at > paused_at]
    assert len(first_after_pause) < 6, first_after_pause  # A stopped calling within its lease, not at the end
    assert JobRun.objects.filter(job__in=jobs, attempt=2).exists()
    # Stopped while the proxy flows again: A writes the outcomes it held (refused as stale) and
    # exits, instead of waiting for a database the closed proxy no longer reaches until the
    # teardown's SIGKILL.
    processes.stop(cut_off)


def test_a_worker_killed_with_runs_in_flight_costs_them_one_lease(processes, tenant, queue_name, settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the loopback receiver, when saved too
    receiver = SlowReceiver(0.1, first_seconds=60)  # attempt 1 is in flight when the worker dies
    jobs = [
        services.job_create(
            tenant,
            services.JobSpec(
                name=f"inflight-{number}",
                target_kind="http",
                every=3600,
                queue=queue_name,
                max_attempts=3,
                retry_backoff_seconds=1,
                timeout_seconds=120,
                http={"method": "POST", "url": receiver.url, "body": "{}"},
            ),
        )
        for number in range(200)
    ]
    doomed = processes.worker(queue_name, name="doomed", concurrency=1, **FAST)
    processes.beat("beat", "--max-sleep", "1", **FAST)
    Job.objects.filter(id__in=[job.id for job in jobs]).update(next_run_at=db_now())
    services.wake_beats()
    wait_for(lambda: len(receiver.arrivals) == len(jobs), timeout=60, what="every run's attempt 1 in flight")

    processes.stop(doomed, signal.SIGKILL)
    processes.worker(queue_name, name="successor", **FAST)
    wait_for(
        lambda: JobRun.objects.filter(job__in=jobs, state="succeeded").count() == len(jobs),
        timeout=90,
        what="every run succeeded on the successor",
    )

    runs = list(JobRun.objects.filter(job__in=jobs))
    assert len(runs) == len(jobs)  # one run a fire, however many attempts
    assert {run.attempt for run in runs} == {2}  # one lease lost each, then the next attempt
    assert all([a["outcome"] for a in run.attempts] == ["lost", "succeeded"] for run in runs)
    keys = {}
    for key, attempt, _ in receiver.arrivals:
        keys.setdefault(key, []).append(attempt)
    assert sorted(keys) == sorted(run.fire_key for run in runs)  # webhook-id: the same on both attempts
    assert all(sorted(attempts) == [1, 2] for attempts in keys.values()), keys
