"""Chains (docs/chains.md) with a real beat and worker: the children run with their parent's fire
key and run id, and a parent delivered twice starts one child."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import Job, JobRun, RunState, db_now, fire_key
from tests.conftest import wait_for
from tests.integration.ledger.test_chains import job

FAIL = "scheduler_app.fail"


# --- a real beat and worker ----------------------------------------------------------------


def results_of(job_: Job) -> list[dict]:
    return [
        json.loads(result)
        for result in JobRun.objects.filter(job=job_, state=RunState.SUCCEEDED).values_list("result", flat=True)
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_and_worker_run_the_children_with_their_parents_fire(processes, queue_name):
    tenant = services.tenant_create(slug="chains", name="Chains")
    soon = db_now() + timedelta(seconds=2)
    good = job(tenant, "good", at=soon, queue=queue_name)
    bad = job(tenant, "bad", task_name=FAIL, at=soon, max_attempts=1, queue=queue_name)
    after_good = job(tenant, "after-good", after_job="good", queue=queue_name)
    good_failed = job(tenant, "good-failed", after_job="good", after_states=["failed", "dead"], queue=queue_name)
    after_bad = job(tenant, "after-bad", after_job="bad", after_states=["failed", "dead"], queue=queue_name)
    bad_succeeded = job(tenant, "bad-succeeded", after_job="bad", queue=queue_name)
    processes.worker(queue_name)
    processes.beat("beat", "--max-sleep", "5")

    wait_for(lambda: results_of(after_good) and results_of(after_bad), timeout=90, what="both children to run")

    good_run = JobRun.objects.get(job=good)
    bad_run = JobRun.objects.get(job=bad)
    assert (good_run.state, bad_run.state) == (RunState.SUCCEEDED, RunState.DEAD)
    [seen] = results_of(after_good)
    assert (seen["parent_fire_key"], seen["parent_run_id"]) == (good_run.fire_key, good_run.id)
    assert seen["fire_key"] == fire_key(after_good.id, good_run.scheduled_at)
    [seen_bad] = results_of(after_bad)
    assert (seen_bad["parent_fire_key"], seen_bad["parent_run_id"]) == (bad_run.fire_key, bad_run.id)
    # Recorded in the transaction of the parent's end, or never: the others are not coming.
    assert not JobRun.objects.filter(job__in=[good_failed, bad_succeeded]).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_chain_whose_parent_is_redelivered_starts_one_child(processes, queue_name):
    tenant = services.tenant_create(slug="chains-again", name="Chains again")
    parent = job(tenant, "parent", queue=queue_name)
    child = job(tenant, "child", after_job="parent", queue=queue_name)
    processes.worker(queue_name)
    processes.beat("beat", "--max-sleep", "5")

    run = services.job_trigger(parent)  # published once at commit
    publish_runs([RunMessage.of(run.id, 1, parent)])  # and the same message again

    wait_for(
        lambda: JobRun.objects.filter(id=run.id, duplicate_deliveries__gte=1).exists() and results_of(child),
        timeout=60,
        what="the duplicate delivery and the child's run",
    )
    [seen] = results_of(child)
    assert seen["parent_run_id"] == run.id
    assert JobRun.objects.filter(job=child).count() == 1
