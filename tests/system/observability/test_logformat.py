"""CRONFLEET_LOG_FORMAT=json: a real beat, worker and web server write one JSON object per
line, with the run, job, tenant, attempt, fire key, queue and node where they apply; plain
text stays the default. The formatter itself is tested in
tests/unit/observability/test_logformat.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scheduler_app import services
from scheduler_app.models import JobRun, RunState, db_now
from tests.conftest import ROOT, process_env, wait_for
from tests.support.observing import free_ports, start_worker


def json_lines(text: str) -> list[dict]:
    """Every line of `text` as JSON (an assertion error naming the first that is not)."""
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            found.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not JSON: {line!r}\n--- whole log:\n{text}") from None
    return found


def test_plain_text_stays_the_default(db):
    done = subprocess.run(
        [sys.executable, "manage.py", "runbeat", "--once"],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("runbeat: started")


def test_an_unknown_log_format_stops_start_up(db):
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=process_env(CRONFLEET_LOG_FORMAT="xml"),
        timeout=60,
    )

    assert done.returncode != 0 and "CRONFLEET_LOG_FORMAT must be plain or json" in done.stderr


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_beat_and_a_worker_log_json_lines_with_the_runs_context(tenant, processes, queue_name):
    worker = start_worker(processes, queue_name, "worker", concurrency=1, CRONFLEET_LOG_FORMAT="json")
    job = services.job_create(
        tenant,
        services.JobSpec(name="fails", task_name="scheduler_app.fail", at=db_now(), queue=queue_name, max_attempts=1),
    )
    beat = processes.beat("beat", "--max-sleep", "1", CRONFLEET_LOG_FORMAT="json")

    run = wait_for(lambda: JobRun.objects.filter(job=job, state=RunState.DEAD).first(), timeout=60, what="a dead run")
    processes.stop(beat)
    processes.stop(worker)

    beat_lines, worker_lines = json_lines(processes.log("beat")), json_lines(processes.log("worker"))
    assert [line["message"] for line in beat_lines][0].startswith("runbeat: started")
    [turn] = [line for line in beat_lines if line["message"].startswith("beat turn: claimed 1 jobs")]
    assert turn["node"].startswith("beat@") and turn["node"].endswith(f":{beat.pid}") and turn["pid"] == beat.pid
    failed = [line for line in worker_lines if "failed: RuntimeError" in line["message"]]
    assert failed, worker_lines
    expected = {
        "run_id": run.id,
        "attempt": 1,
        "job": f"{tenant.slug}/fails",
        "tenant": tenant.slug,
        "fire_key": run.fire_key,
        "queue": queue_name,
    }
    for line in failed:
        assert {key: line.get(key) for key in expected} == expected, line
        assert line["node"].startswith("worker-") and line["task_id"] == f"cronfleet-run-{run.id}-1"
    celery = [line for line in worker_lines if "raised expected: RunFailed" in line["message"]]
    assert celery and celery[0]["run_id"] == run.id  # Celery's own line about the task, with the same context
    assert any(line["message"].endswith("ready.") for line in worker_lines)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_web_server_logs_json_lines(tmp_path, processes):
    [port] = free_ports(1)
    env = {
        "CRONFLEET_VAR_DIR": str(tmp_path),
        "CRONFLEET_WEB_BIND": f"127.0.0.1:{port}",
        "CRONFLEET_WEB_WORKERS": "1",
        "CRONFLEET_WEB_THREADS": "2",
        "CRONFLEET_LOG_FORMAT": "json",
    }
    server = processes.start("web", [sys.executable, "-m", "gunicorn", "-c", "project/gunicorn.conf.py"], **env)
    from tests.support.web import get_or_none

    wait_for(
        lambda: server.poll() is not None or get_or_none(port, "/healthz") == 200, timeout=60, what="gunicorn to answer"
    )
    assert get_or_none(port, "/api/v1/no-such-thing") == 404
    processes.stop(server)

    lines = json_lines(processes.log("web"))
    assert any(line["logger"] == "gunicorn.access" and "GET /healthz" in line["message"] for line in lines)
    assert any(line["logger"] == "django.request" and "Not Found" in line["message"] for line in lines)
    assert any(line["logger"] == "gunicorn.error" and line["message"].startswith("Listening at") for line in lines)
