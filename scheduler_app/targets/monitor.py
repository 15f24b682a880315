"""Monitored jobs: run elsewhere (a system crontab, a Kubernetes CronJob, another service's
timer), which pings Cronfleet's check-in URL. Cronfleet never runs them: the beat records each
fire as a run waiting for its ping (dispatch/checkins.py), no message goes to a broker."""

from __future__ import annotations

from scheduler_app.models import DEFAULT_GRACE_SECONDS as DEFAULT_GRACE_SECONDS  # re-exported: admin, dispatch
from scheduler_app.targets.base import PermanentFailure
from scheduler_app.validation import InvalidInput

MAX_GRACE_SECONDS = 7 * 86400


def check(spec, tenant: str | None = None) -> dict:
    """The target_config of a monitored job: its grace, how long after a fire (or after a
    /start) a successful ping may come before the run counts as missed."""
    config = spec.monitor if spec.monitor is not None else {}
    if not isinstance(config, dict):
        raise InvalidInput("monitor", "must be an object with grace_seconds")
    unknown = sorted(set(config) - {"grace_seconds"})
    if unknown:
        raise InvalidInput(f"monitor.{unknown[0]}", "is not a field of a monitored job (only grace_seconds)")
    grace = config.get("grace_seconds", DEFAULT_GRACE_SECONDS)
    if isinstance(grace, bool) or not isinstance(grace, int) or not 1 <= grace <= MAX_GRACE_SECONDS:
        raise InvalidInput("grace_seconds", f"must be a whole number of seconds from 1 to {MAX_GRACE_SECONDS}")
    return {"grace_seconds": grace}


def perform(started):
    """Never called: the beat publishes no message for a monitored job."""
    raise PermanentFailure("a monitored job runs elsewhere and checks in; Cronfleet does not run it")
