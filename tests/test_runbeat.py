"""The runbeat command: wake-up on job changes, --once, clean stop, a database lost mid-loop."""

import signal
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.db import InterfaceError

from scheduler_app import dispatch, services
from scheduler_app.ledger import retention
from scheduler_app.management.commands import runbeat
from scheduler_app.models import JobRun, db_now
from tests.conftest import ROOT, process_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_sleeping_beat_wakes_when_a_job_is_created(tenant, processes, queue_name):
    beat = processes.beat("beat", "--max-sleep", "120")  # nothing due: it would sleep two minutes
    wait_for(lambda: "runbeat: started" in processes.log("beat"), timeout=30, what="the beat to start")

    job = services.job_create(tenant, services.JobSpec(name="new", task_name="scheduler_app.echo", every=1,
                                                       queue=queue_name))

    # NOTIFY wakes it at once; it then sleeps exactly until the first fire, a second away.
    wait_for(lambda: JobRun.objects.filter(job=job).exists(), timeout=15, what="the new job's first run")
    assert processes.stop(beat, signal.SIGTERM) == 0
    assert "runbeat: stopped" in processes.log("beat")


def test_runbeat_once_runs_one_turn_and_exits(tenant, queue_name):
    job = services.job_create(tenant, services.JobSpec(name="soon", task_name="scheduler_app.echo",
                                                       at=db_now(), queue=queue_name))

    done = subprocess.run([sys.executable, "manage.py", "runbeat", "--once"], cwd=ROOT, env=process_env(),
                          capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert JobRun.objects.filter(job=job, state="queued").count() == 1


@pytest.mark.parametrize(("flag", "value"), [("--batch-size", "0"), ("--max-sleep", "-1")])
def test_runbeat_rejects_bad_options(flag, value):
    done = subprocess.run([sys.executable, "manage.py", "runbeat", flag, value], cwd=ROOT, env=process_env(),
                          capture_output=True, text=True, timeout=60)

    assert done.returncode != 0
    assert flag in done.stderr


@pytest.mark.parametrize("failing", ["retention step", "next due time"])
def test_the_database_lost_between_a_turn_and_the_sleep_costs_a_retry_not_the_beat(tenant, queue_name,
                                                                                 monkeypatch, caplog, failing):
    """After its turn the beat prunes and asks when the next job is due: both query the
    database, which may be gone by then (a failover). The beat retries; it used to exit."""
    services.job_create(tenant, services.JobSpec(name="every", task_name="scheduler_app.echo", every=1,
                                                 queue=queue_name))
    command = runbeat.Command()
    real_due, real_step = dispatch.seconds_until_due, retention.Pruner.step
    failures = []

    def lost_once(real):
        def call(*args, **kwargs):
            if not failures:
                failures.append(real.__name__)
                raise InterfaceError("the connection is closed")
            return real(*args, **kwargs)
        return call

    def due_then_stop(*args, **kwargs):  # the second turn reached its sleep: the retry worked
        if failing == "next due time" and not failures:
            return lost_once(real_due)(*args, **kwargs)
        command.stop.set()
        return real_due(*args, **kwargs)

    monkeypatch.setattr(dispatch, "seconds_until_due", due_then_stop)
    if failing == "retention step":
        monkeypatch.setattr(retention.Pruner, "step", lost_once(real_step))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        call_command(command, "--max-sleep", "1")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    assert failures, "the database error was never raised"
    assert "beat turn failed: InterfaceError: the connection is closed" in caplog.text
