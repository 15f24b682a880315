"""The runbeat command as a real process: wake-up on job changes, --once, clean stop, bad options."""

import signal
import subprocess
import sys

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, db_now
from tests.conftest import ROOT, process_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_sleeping_beat_wakes_when_a_job_is_created(tenant, processes, queue_name):
    beat = processes.beat("beat", "--max-sleep", "120")  # nothing due: it would sleep two minutes
    wait_for(lambda: "runbeat: started" in processes.log("beat"), timeout=30, what="the beat to start")

    job = services.job_create(
        tenant, services.JobSpec(name="new", task_name="scheduler_app.echo", every=1, queue=queue_name)
    )

    # NOTIFY wakes it at once; it then sleeps exactly until the first fire, a second away.
    wait_for(lambda: JobRun.objects.filter(job=job).exists(), timeout=15, what="the new job's first run")
    assert processes.stop(beat, signal.SIGTERM) == 0
    assert "runbeat: stopped" in processes.log("beat")


def test_runbeat_once_runs_one_turn_and_exits(tenant, queue_name):
    job = services.job_create(
        tenant, services.JobSpec(name="soon", task_name="scheduler_app.echo", at=db_now(), queue=queue_name)
    )

    done = subprocess.run(
        [sys.executable, "manage.py", "runbeat", "--once"],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert JobRun.objects.filter(job=job, state="queued").count() == 1


@pytest.mark.parametrize(("flag", "value"), [("--batch-size", "0"), ("--max-sleep", "-1")])
def test_runbeat_rejects_bad_options(flag, value):
    done = subprocess.run(
        [sys.executable, "manage.py", "runbeat", flag, value],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert flag in done.stderr
