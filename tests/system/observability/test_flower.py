"""Flower tells the truth: a failed, retried or dead attempt is a FAILURE (in Flower and in
the result backend), a duplicate delivery is listed as DUPLICATE, each under its job's name
(`tenant/job`, Celery's shadow name), and none of it makes Celery deliver a message again. A
real Flower process, read through its HTTP API. The shadow name on the messages is tested in
tests/integration/observability/test_flower.py, the task's acknowledgement settings in
tests/unit/observability/test_flower.py."""

from __future__ import annotations

import base64
import json
import sys
import urllib.request

import pytest
import redis
from celery.result import AsyncResult
from django.conf import settings

from project.celery import app
from scheduler_app import services
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import JobRun, RunState, celery_task_id
from tests.conftest import take_broker_messages, wait_for
from tests.support.observing import free_ports, start_worker

FLOWER_AUTH = "flower:test-password"


def spec(**fields) -> services.JobSpec:
    fields.setdefault("task_name", "scheduler_app.echo")
    return services.JobSpec(**fields)


# --- a real Flower ----------------------------------------------------------------------------


class Flower:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.auth = "Basic " + base64.b64encode(FLOWER_AUTH.encode()).decode()

    def get(self, path: str):
        request = urllib.request.Request(self.base + path, headers={"Authorization": self.auth})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
        return json.loads(body) if body.startswith(("{", "[")) else body

    def answers(self) -> bool:
        try:
            return self.get("/healthcheck") == "OK"
        except OSError:
            return False

    def task(self, task_id: str) -> dict:
        return self.get(f"/api/task/info/{task_id}")

    def tasks(self, **query) -> dict:
        return self.get("/api/tasks?" + "&".join(f"{key}={value}" for key, value in query.items()))


def unacked_task_ids() -> set[str]:
    """Task ids of the messages Redis holds as delivered but not acknowledged (acks_late)."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        raw = client.hvals("unacked")
    finally:
        client.close()
    return {json.loads(value)[0]["headers"]["id"] for value in raw}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_flower_shows_each_runs_true_outcome_under_its_jobs_name(tenant, processes, queue_name):
    [port] = free_ports(1)
    processes.start(
        "flower",
        [sys.executable, "-m", "celery", "-A", "project", "flower", f"--port={port}", "--address=127.0.0.1"],
        FLOWER_BASIC_AUTH=FLOWER_AUTH,
    )
    flower = Flower(port)
    wait_for(flower.answers, timeout=60, what="Flower to answer")
    worker = start_worker(processes, queue_name, "worker", heartbeat=True)
    # Flower knows a worker from its events only: once it lists this one, it hears events.
    wait_for(lambda: _flower_sees_worker(flower), timeout=60, what="Flower to see the worker's events")
    ok = services.job_create(tenant, spec(name="ok", every=3600, queue=queue_name))
    flaky = services.job_create(
        tenant,
        spec(
            name="flaky",
            task_name="scheduler_app.fail",
            every=3600,
            queue=queue_name,
            max_attempts=2,
            retry_backoff_seconds=1,
        ),
    )
    processes.beat("beat", "--max-sleep", "1")  # requeues the retry

    ok_run = services.job_trigger(ok, actor="test")
    flaky_run = services.job_trigger(flaky, actor="test")
    wait_for(
        lambda: (
            JobRun.objects.filter(id=ok_run.id, state=RunState.SUCCEEDED).exists()
            and JobRun.objects.filter(id=flaky_run.id, state=RunState.DEAD).exists()
        ),
        timeout=60,
        what="one run to succeed and the other to die",
    )
    publish_runs([RunMessage.of(ok_run.id, 1, ok)])  # the same message again, after it succeeded
    wait_for(
        lambda: JobRun.objects.filter(id=ok_run.id, duplicate_deliveries=1).exists(),
        timeout=30,
        what="the duplicate to be counted",
    )

    slug = tenant.slug
    ok_id, first_id, last_id = (
        celery_task_id(ok_run.id, 1),
        celery_task_id(flaky_run.id, 1),
        celery_task_id(flaky_run.id, 2),
    )
    wait_for(lambda: flower.task(last_id).get("state") == "FAILURE", timeout=30, what="Flower to see the dead run")
    duplicates = wait_for(
        lambda: flower.tasks(state="DUPLICATE", limit=10), timeout=30, what="Flower to list the duplicate"
    )

    succeeded, retried, died = flower.task(ok_id), flower.task(first_id), flower.task(last_id)
    assert (succeeded["name"], succeeded["state"], succeeded["result"]) == (f"{slug}/ok", "SUCCESS", "'succeeded'")
    assert (retried["name"], retried["state"]) == (f"{slug}/flaky", "FAILURE")
    assert f"run {flaky_run.id} attempt 1 retrying: RuntimeError" in retried["exception"]
    assert (died["name"], died["state"]) == (f"{slug}/flaky", "FAILURE")
    assert died["exception"].startswith(f"RunFailed('run {flaky_run.id} attempt 2 dead: RuntimeError")
    [(duplicate_id, duplicate)] = duplicates.items()
    assert duplicate_id.startswith(f"{ok_id}.duplicate.")
    assert (duplicate["name"], duplicate["state"]) == (f"{slug}/ok", "DUPLICATE"), duplicate
    assert duplicate["result"].startswith(f"duplicate delivery of {ok_id}, not executed: run is succeeded at attempt 1")
    # Celery's own view: the dead attempt's failure is in the result backend; Flower counts it.
    assert AsyncResult(last_id, app=app).state == "FAILURE"
    assert worker.poll() is None

    # Raising after recording changed nothing Celery delivers: every message was acknowledged,
    # no attempt ran twice, and the ledger holds exactly the attempts the beat made.
    assert unacked_task_ids() & {ok_id, first_id, last_id} == set()
    assert take_broker_messages(queue_name) == []
    flaky_run.refresh_from_db()
    assert [(a["attempt"], a["outcome"]) for a in flaky_run.attempts] == [(1, "retrying"), (2, "dead")]
    assert flaky_run.duplicate_deliveries == 0
    processes.stop(worker)
    assert "raised expected: RunFailed" in processes.log("worker")  # no traceback for an expected failure


def _flower_sees_worker(flower: Flower) -> bool:
    workers = flower.get("/workers?json=1")
    names = workers.get("data", workers) if isinstance(workers, dict) else workers
    return any("worker-" in json.dumps(entry) for entry in names)
