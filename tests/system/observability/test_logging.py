"""Each log line of ours is printed once: in a Celery worker (through Celery's handler) and in
runbeat (through the console handler of settings.LOGGING)."""

import re
import subprocess
import sys

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, RunState, db_now
from tests.conftest import ROOT, process_env, wait_for

# What `celery worker` does to logging before it runs tasks (celery.apps.worker: app.log.setup).
AS_A_WORKER = """
import logging
import django
django.setup()
from project.celery import app
app.log.setup(loglevel=logging.INFO)
logging.getLogger("scheduler_app.worker.execution").info("run %s attempt %s failed", 7, 1)
"""


def test_a_worker_prints_each_of_our_lines_once_in_celerys_format():
    done = subprocess.run(
        [sys.executable, "-c", AS_A_WORKER], cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "run 7 attempt 1 failed" in line]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("[") and "INFO/MainProcess] run 7 attempt 1 failed" in lines[0]


@pytest.mark.django_db(transaction=True)
def test_runbeat_still_prints_its_lines_once(tenant, queue_name):
    services.job_create(
        tenant, services.JobSpec(name="soon", task_name="scheduler_app.echo", at=db_now(), queue=queue_name)
    )

    done = subprocess.run(
        [sys.executable, "manage.py", "runbeat", "--once"],
        cwd=ROOT,
        env=process_env(CRONFLEET_LOG_LEVEL="INFO"),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    turns = [line for line in done.stderr.splitlines() if "beat turn: claimed 1 jobs, published 1 runs" in line]
    assert len(turns) == 1, done.stderr
    assert " INFO scheduler_app.beat beat turn: " in turns[0]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_prints_each_of_our_lines_once(tenant, processes, queue_name):
    job = services.job_create(
        tenant,
        services.JobSpec(name="fails", task_name="scheduler_app.fail", every=3600, queue=queue_name, max_attempts=1),
    )
    processes.worker(queue_name, concurrency=1)
    run = services.job_trigger(job, actor="test")

    wait_for(lambda: JobRun.objects.filter(id=run.id, state=RunState.DEAD).exists(), timeout=60, what="a dead run")

    log = processes.log("worker")
    # The target's failure is logged by scheduler_app at INFO: once, in Celery's format, and
    # never through the console handler of settings.LOGGING ("<time> INFO scheduler_app...").
    failed = [line for line in log.splitlines() if "failed: RuntimeError('scheduler_app.fail always fails')" in line]
    assert len(failed) == 1, log
    assert "INFO/ForkPoolWorker" in failed[0]
    assert not re.search(r"^\d{4}-\d\d-\d\d [\d:,]+ \w+ scheduler_app\.", log, re.MULTILINE), log
