"""HTTP jobs through a real worker and beat against a loopback receiver: retries until success,
and each retry sequence (Retry-After, timeout, 404, 410). The fixtures are
tests/integration/targets/test_http_jobs.py's."""

from datetime import datetime

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, RunState
from tests.conftest import wait_for
from tests.integration.targets.test_http_jobs import http_job, receiver_for  # noqa: F401 (fixtures)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_real_worker_retries_5xx_then_succeeds(receiver_for, http_job, processes, queue_name):
    receiver = receiver_for((503, {}, b"busy"), (503, {}, b"busy"), (200, {}, b"ok"))
    job = http_job(receiver.url, queue=queue_name, retry_backoff_seconds=1, max_attempts=5)
    run = services.job_trigger(job)
    env = {"CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8"}
    processes.worker(queue_name, **env)
    processes.beat("beat", "--max-sleep", "1", **env)

    wait_for(
        lambda: JobRun.objects.filter(id=run.id, state=RunState.SUCCEEDED).exists(),
        timeout=60,
        what="the run to succeed on its third attempt",
    )

    run.refresh_from_db()
    assert run.attempt == 3 and len(receiver.requests) == 3
    assert {headers["webhook-id"] for _, _, headers, _ in receiver.requests} == {run.fire_key}
    assert [headers["cronfleet-attempt"] for _, _, headers, _ in receiver.requests] == ["1", "2", "3"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "final_state", "requests", "paused"),
    [
        ([(429, {"Retry-After": "2"}, b"slow down"), (200, {}, b"ok")], "succeeded", 2, False),
        ([("hang", {"seconds": 3}, b""), (200, {}, b"ok")], "succeeded", 2, False),  # attempt 1 times out
        ([(404, {}, b"no such hook")], "failed", 1, False),
        ([(410, {}, b"gone")], "failed", 1, True),
    ],
    ids=["429-retry-after", "timeout", "404", "410"],
)
def test_retry_sequences_with_a_real_worker(
    receiver_for, http_job, processes, queue_name, script, final_state, requests, paused
):
    receiver = receiver_for(*script)
    job = http_job(receiver.url, queue=queue_name, retry_backoff_seconds=1, max_attempts=3, timeout_seconds=1)
    run = services.job_trigger(job)
    env = {"CRONFLEET_HTTP_ALLOWED_NETWORKS": "127.0.0.0/8"}
    processes.worker(queue_name, **env)
    processes.beat("beat", "--max-sleep", "1", **env)

    wait_for(
        lambda: JobRun.objects.filter(id=run.id, state=final_state).exists(),
        timeout=60,
        what=f"the run to end {final_state}",
    )

    run.refresh_from_db()
    job.refresh_from_db()
    assert (run.attempt, len(receiver.requests), job.enabled) == (requests, requests, not paused)
    if script[0][0] == 429:
        first = run.attempts[0]
        waited = run.started_at - datetime.fromisoformat(first["finished_at"])
        assert first["outcome"] == "retrying" and "http 429" in first["error"]
        assert waited.total_seconds() >= 1.9  # Retry-After: 2, over the job's 1 s backoff
