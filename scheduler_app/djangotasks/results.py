"""A call's job and its run as Django's TaskResult: what get_result() and refresh() read.

Pure mapping from rows already read; no query here.
"""

from __future__ import annotations

import json

from scheduler_app import taskapi
from scheduler_app.models import Job, JobRun, RunState

# The run states as Django's task statuses: a run that will go again (retrying, or lost and
# requeued as a new attempt) is READY, as Django says of a task "ready to be executed again".
READY_STATES = frozenset({RunState.PENDING, RunState.QUEUED, RunState.RETRYING, RunState.LOST})
FAILED_STATES = frozenset({RunState.FAILED, RunState.DEAD, RunState.SKIPPED, RunState.CANCELLED})


def status_name(run: JobRun | None) -> str:
    """READY, RUNNING, SUCCESSFUL or FAILED (Django's TaskResultStatus names)."""
    if run is None or run.state in READY_STATES:
        return "READY"
    if run.state == RunState.RUNNING:
        return "RUNNING"
    if run.state == RunState.SUCCEEDED:
        return "SUCCESSFUL"
    return "FAILED"


def split_error(text: str) -> tuple[str, str]:
    """(exception class path, traceback) from an attempt's error text (targets/djangotask.py
    writes '<class path>: <message>' then the traceback; other errors are Cronfleet's own)."""
    first, _, rest = text.partition("\n")
    path, colon, _ = first.partition(": ")
    if colon and path.replace(".", "").replace("_", "").isalnum() and "." in path:
        return path, rest or text
    return "scheduler_app.targets.base.PermanentFailure", text


def error_texts(run: JobRun) -> list[str]:
    """Each failed attempt's error, oldest first; the latest in full (the others as the
    attempt history keeps them)."""
    texts = [entry.get("error") or "" for entry in run.attempts or [] if entry.get("outcome") != RunState.SUCCEEDED]
    if run.error and run.state in (RunState.FAILED, RunState.DEAD, RunState.RETRYING):
        texts = texts[:-1] + [run.error] if texts else [run.error]
    return [text for text in texts if text]


def return_value(run: JobRun):
    """The run's result as the task returned it (JSON); a result cut at the bound
    (CRONFLEET_RESULT_MAX_BYTES) comes back as the stored text."""
    if not run.result:
        return None
    try:
        return json.loads(run.result)
    except ValueError:
        return run.result


def task_result(task, job: Job, run: JobRun | None, *, backend: str):
    """Django's TaskResult for `job` (a call, or a periodic task's job) and its latest run."""
    api = taskapi.require()
    status = status_name(run)
    workers = [entry.get("worker") or "" for entry in (run.attempts if run else []) or []]
    if run is not None and run.state == RunState.RUNNING:
        workers.append(run.worker)
    result = api.TaskResult(
        task=task,
        id=str(job.id),
        status=api.TaskResultStatus[status],
        enqueued_at=run.enqueued_at if run else None,
        started_at=run.started_at if run else None,
        finished_at=run.finished_at if run and status in ("SUCCESSFUL", "FAILED") else None,
        last_attempted_at=run.started_at if run else None,
        args=job.args,
        kwargs=job.kwargs,
        backend=backend,
        errors=[
            api.base.TaskError(exception_class_path=path, traceback=trace)
            for path, trace in map(split_error, error_texts(run) if run else [])
        ],
        worker_ids=workers,
    )
    if run is not None and status == "SUCCESSFUL":
        object.__setattr__(result, "_return_value", return_value(run))
    return result
