"""SIGTERM to a worker's whole process group (systemd's KillMode=control-group, issue 28): a
pool process busy with a run finishes it, the main process's warm shutdown proceeds, and the
other ways a pool process ends (idle, cold shutdown) are as before. worker/shutdown.py.

Each worker of the `processes` fixture is started in a session of its own, so its pid is its
process group's id, and os.killpg(pid, ...) signals it and every pool process at once.
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from project.celery import app
from scheduler_app import services
from scheduler_app.models import JobRun, RunState
from tests.conftest import take_broker_messages, wait_for
from tests.support.http_receiver import Receiver
from tests.support.servers import children_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXIT_SECONDS = 60  # how long a stopping worker may take on a loaded machine (its runs included)


def sleeping_runs(tenant, queue: str, count: int, seconds: float | list[float]) -> list[JobRun]:
    """`count` runs of jobs of their own (no overlap between them), each sleeping `seconds`
    (or the run's own of a list)."""
    runs = []
    for i in range(count):
        job = services.job_create(
            tenant,
            services.JobSpec(
                name=f"sleeps-{i}",
                task_name="scheduler_app.sleep",
                kwargs={"seconds": seconds[i] if isinstance(seconds, list) else seconds},
                every=3600,
                queue=queue,
                max_attempts=2,
            ),
        )
        runs.append(services.job_trigger(job, actor="test"))
    assert all(run.state == RunState.QUEUED for run in runs)
    return runs


def all_running(runs: list[JobRun]) -> bool:
    return JobRun.objects.filter(id__in=[run.id for run in runs], state=RunState.RUNNING).count() == len(runs)


def pool_processes(pid: int) -> set[int]:
    """A worker's live pool processes."""
    return set(children_of(pid))


def exit_status(proc: subprocess.Popen, timeout: float) -> int | None:
    """The process's exit status, or None when it still runs after `timeout` seconds."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def test_sigterm_to_the_whole_group_lets_every_busy_pool_process_finish_its_run(tenant, processes, queue_name):
    runs = sleeping_runs(tenant, queue_name, count=2, seconds=5)
    worker = processes.worker(queue_name, name="busy", concurrency=2)
    wait_for(lambda: all_running(runs), timeout=60, what="both pool processes running a run")

    os.killpg(worker.pid, signal.SIGTERM)  # as systemd's KillMode=control-group does
    started = time.monotonic()
    status = exit_status(worker, EXIT_SECONDS)

    log = processes.log("busy")
    assert status == 0, f"status {status} after {time.monotonic() - started:.1f}s\n{log}"
    for run in JobRun.objects.filter(id__in=[run.id for run in runs]):
        assert (run.state, run.attempt) == (RunState.SUCCEEDED, 1), (run.id, run.state, run.attempt, run.error, log)
        assert [(a["attempt"], a["outcome"]) for a in run.attempts] == [(1, "succeeded")]
        assert run.duplicate_deliveries == 0
    assert take_broker_messages(queue_name) == []  # acknowledged: nothing goes back to be delivered again
    assert "WorkerLostError" not in log and "exited prematurely" not in log, log
    assert "exited with" not in log, log  # billiard's line for a pool process that ends with a status not 0
    assert log.count("SIGTERM during the task") == 2, log


def test_sigterm_to_the_whole_group_lets_http_runs_in_flight_end_and_be_written(
    tenant, processes, queue_name, settings
):
    """HTTP runs in flight live on the pool process's event loop, not in a task: a group
    SIGTERM lets each call answer and its end be written (worker/flight.py's drain)."""
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    receiver = Receiver([("hang", {"seconds": 4}, b"ok")] * 3)  # each answers 4 s after its call
    runs = [
        services.job_trigger(
            services.job_create(
                tenant,
                services.JobSpec(
                    name=f"hook-{i}",
                    target_kind="http",
                    every=3600,
                    queue=queue_name,
                    max_attempts=2,
                    timeout_seconds=30,
                    http={"method": "POST", "url": receiver.url, "headers": {}, "body": ""},
                ),
            )
        )
        for i in range(3)
    ]
    try:
        worker = processes.worker(
            queue_name, name="flight", concurrency=1, CRONFLEET_HTTP_ALLOWED_NETWORKS="127.0.0.0/8"
        )
        wait_for(lambda: len(receiver.requests) == 3, timeout=60, what="the three calls in flight")

        os.killpg(worker.pid, signal.SIGTERM)
        status = exit_status(worker, EXIT_SECONDS)
    finally:
        receiver.close()

    log = processes.log("flight")
    assert status == 0, log
    for run in JobRun.objects.filter(id__in=[run.id for run in runs]):
        assert (run.state, run.attempt) == (RunState.SUCCEEDED, 1), (run.id, run.state, run.attempt, run.error, log)
        assert [(a["attempt"], a["outcome"]) for a in run.attempts] == [(1, "succeeded")]
    assert len(receiver.requests) == 3  # one call each: none cut off and made again
    assert take_broker_messages(queue_name) == []


def test_an_idle_worker_sigtermed_as_a_group_exits_at_once(processes, queue_name):
    worker = processes.worker(queue_name, name="idle", concurrency=2)

    os.killpg(worker.pid, signal.SIGTERM)
    started = time.monotonic()
    status = exit_status(worker, EXIT_SECONDS)

    log = processes.log("idle")
    assert status == 0, log
    assert time.monotonic() - started < 20, log
    assert "WorkerLostError" not in log and "exited prematurely" not in log, log


@pytest.mark.parametrize("first", ["sigterm-to-the-group", "none"])
def test_a_cold_shutdown_stops_busy_pool_processes_at_once(tenant, processes, queue_name, first):
    """SIGQUIT to the main process (a cold shutdown, alone or after the group's SIGTERM)
    cancels the runs in progress: their pool processes obey the main process's SIGTERM at
    once, they do not wait for their minute-long runs."""
    runs = sleeping_runs(tenant, queue_name, count=2, seconds=120)
    worker = processes.worker(queue_name, name="cold", concurrency=2)
    wait_for(lambda: all_running(runs), timeout=60, what="both pool processes running a run")

    if first == "sigterm-to-the-group":
        os.killpg(worker.pid, signal.SIGTERM)
        wait_for(lambda: "Warm shutdown" in processes.log("cold"), timeout=30, what="the warm shutdown")
    started = time.monotonic()
    os.kill(worker.pid, signal.SIGQUIT)
    status = exit_status(worker, EXIT_SECONDS)

    assert status is not None, f"still running {EXIT_SECONDS}s after SIGQUIT\n{processes.log('cold')}"
    assert time.monotonic() - started < EXIT_SECONDS
    assert not JobRun.objects.filter(id__in=[run.id for run in runs], state=RunState.SUCCEEDED).exists()


def test_autoscale_still_shrinks_its_idle_pool_processes(tenant, processes, queue_name):
    """billiard's shrink() SIGTERMs idle pool processes: they exit at once, as before."""
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "project",
        "worker",
        "-Q",
        queue_name,
        "--autoscale=3,1",
        "-n",
        f"scale-{uuid.uuid4().hex[:6]}@%h",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
        "-l",
        "info",
    ]
    worker = processes.start("scale", argv, AUTOSCALE_KEEPALIVE="1")  # idle a second, then shrink
    wait_for(lambda: "ready." in processes.log("scale") or worker.poll() is not None, timeout=60, what="ready")
    runs = sleeping_runs(tenant, queue_name, count=3, seconds=[1, 6, 6])  # one idle while two are busy

    wait_for(lambda: len(pool_processes(worker.pid)) > 1, timeout=60, what="the pool grown")
    wait_for(
        lambda: JobRun.objects.filter(id__in=[run.id for run in runs], state=RunState.SUCCEEDED).count() == 3,
        timeout=90,
        what="the three runs succeeded",
    )
    wait_for(lambda: len(pool_processes(worker.pid)) == 1, timeout=30, what="the pool shrunk back to one process")

    log = processes.log("scale")
    assert "Scaling down" in log, log
    assert all(run.attempt == 1 for run in JobRun.objects.filter(id__in=[run.id for run in runs]))
    assert "WorkerLostError" not in log and "exited prematurely" not in log, log
    os.killpg(worker.pid, signal.SIGTERM)
    assert exit_status(worker, EXIT_SECONDS) == 0, processes.log("scale")


def test_revoke_with_terminate_still_stops_a_busy_pool_process(tenant, processes, queue_name):
    """revoke(terminate=True) sends SIGTERM from the main process: obeyed at once, as before."""
    [run] = sleeping_runs(tenant, queue_name, count=1, seconds=120)
    worker = processes.worker(queue_name, name="revoke", concurrency=1)
    wait_for(lambda: all_running([run]), timeout=60, what="the run running")
    [busy] = pool_processes(worker.pid)

    app.control.revoke(f"cronfleet-run-{run.id}-1", terminate=True)
    wait_for(lambda: busy not in pool_processes(worker.pid), timeout=30, what="the busy pool process to stop")
    run.refresh_from_db()
    assert run.state != RunState.SUCCEEDED
