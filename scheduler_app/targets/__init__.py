"""What a job runs: one room per target kind, behind one interface.

Each kind's module has
- check(spec, tenant) -> dict: the job spec's target checked when the job is saved for
  the tenant of slug `tenant`, as its target_config (InvalidInput names the field; an
  allow-list entry may be one tenant's, sql/);
- perform(started): one attempt from the worker; the result, or PermanentFailure /
  RetryableFailure (base.py) when the outcome says whether another attempt can help.

task.py (a registered Celery task), http/ (a webhook, with its guard and signing),
command/ (an allow-listed program) and sql/ (an allow-listed statement). The worker calls
perform(); the services call check().
"""

from scheduler_app.targets import command, http, monitor, sql, task
from scheduler_app.targets.base import PermanentFailure, RetryableFailure, to_text

KINDS = {"task": task, "http": http, "command": command, "sql": sql, "monitor": monitor}  # by TargetKind value


def perform(started):
    """Run `started`'s target once (the worker's hook) and return its result."""
    kind = KINDS.get(started.job.target_kind)
    if kind is None:
        raise PermanentFailure(f"unsupported target kind {started.job.target_kind!r}")
    return kind.perform(started)


__all__ = ["KINDS", "PermanentFailure", "RetryableFailure", "perform", "to_text"]
