"""Command jobs end to end through the worker code: the job's program runs, a process of its
own (the allow-list fixture `commands` and command_job are tests/integration/targets/test_target_kinds.py's)."""

import json

from scheduler_app.models import JobRun, RunState
from scheduler_app.worker import execution
from tests.conftest import NOW
from tests.integration.targets.test_target_kinds import command_job, commands  # noqa: F401 (commands: a fixture)


def run_once(job):
    run = JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=NOW, created_at=NOW, state=RunState.QUEUED)
    outcome = execution.execute_run(run.id, 1, worker="w")
    run.refresh_from_db()
    return outcome, run


def test_a_command_job_gets_each_argument_as_one_literal_element(commands, tenant):
    hostile = ["; rm -rf /", "$(id)", "`id`", "a && b", "x | y", "*", "-rf"]
    job = command_job(tenant, {"day": "2024-01-01", "words": hostile})

    outcome, run = run_once(job)

    assert outcome.state == "succeeded"
    printed = json.loads(json.loads(run.result)["stdout"])
    assert printed == {"argv": ["--day", "2024-01-01", "--", *hostile], "fire": run.fire_key}


def test_a_non_zero_exit_is_a_retryable_failure(commands, tenant):
    job = command_job(tenant, {"day": "2024-01-01", "words": ["fail"]})

    outcome, run = run_once(job)

    assert (outcome.state, run.state) == ("retrying", "retrying")
    assert run.error.startswith("exit 3")
