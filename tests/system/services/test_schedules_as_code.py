"""Schedules as code with real processes: a job created by `manage.py schedules apply` is fired
by a real beat and run by a real worker (the rest:
tests/integration/services/test_schedules_as_code.py)."""

from __future__ import annotations

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, RunState
from tests.conftest import wait_for
from tests.integration.services.test_schedules_as_code import declare, jobs_of, run  # noqa: F401 (declare: a fixture)


@pytest.mark.django_db(transaction=True)
def test_a_real_beat_and_worker_fire_a_job_created_by_apply(processes, queue_name, declare):
    services.tenant_create(slug="acme", name="Acme")
    path = declare(
        f'owner = "live"\ntenant = "acme"\n[[jobs]]\nname = "tick"\nevery = 1\n'
        f'task = "scheduler_app.echo"\nqueue = "{queue_name}"\n'
    )
    assert run("apply", "--file", path)[0] == 0
    job = jobs_of("live")["tick"]

    processes.worker(queue_name)
    processes.beat("beat", "--max-sleep", "1")

    wait_for(
        lambda: JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).exists(),
        timeout=60,
        what="a run of the applied job to succeed",
    )
