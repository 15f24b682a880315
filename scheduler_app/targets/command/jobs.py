"""The hooks of the services (check) and of the worker (perform) for command jobs; the
program itself is run by running.py, which knows nothing of Django."""

from __future__ import annotations

from django.conf import settings

from scheduler_app.targets.base import PermanentFailure, RetryableFailure, to_text
from scheduler_app.targets.command.running import InvalidCommand, build_argv, run_command
from scheduler_app.validation import InvalidInput


def check(spec) -> dict:
    """A job's command target ({"name", "params"}) as stored; InvalidInput naming command.<field>."""
    command = spec.command or {}
    name, params = command.get("name", ""), command.get("params") or {}
    if not isinstance(params, dict):
        raise InvalidInput("command.params", "must be an object")
    try:
        build_argv(name, params, settings.CRONFLEET_COMMANDS)
    except InvalidCommand as exc:
        raise InvalidInput(f"command.{exc.field}" if exc.field != "command" else "command", exc.message) from None
    return {"name": name, "params": params}


def perform(started) -> dict:
    """Run the job's allow-listed program; a non-zero exit or a timeout is a retryable failure."""
    run, job = started.run, started.job
    config = job.target_config
    try:
        result = run_command(
            config.get("name", ""), config.get("params") or {}, config=settings.CRONFLEET_COMMANDS,
            timeout=job.timeout_seconds, cwd=settings.CRONFLEET_COMMAND_CWD,
            max_output_bytes=settings.CRONFLEET_RESULT_MAX_BYTES,
            env_extra={"CRONFLEET_FIRE_KEY": run.fire_key, "CRONFLEET_ATTEMPT": str(run.attempt),
                       "CRONFLEET_SCHEDULED_AT": run.scheduled_at.isoformat()},
        )
    except InvalidCommand as exc:
        raise PermanentFailure(f"invalid_command: {exc}") from None
    outcome = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
               "truncated": result.truncated, "elapsed_ms": round(result.elapsed * 1000)}
    if result.timed_out:
        raise RetryableFailure(f"timeout: killed after {job.timeout_seconds}s: {to_text(outcome)}")
    if result.exit_code != 0:
        raise RetryableFailure(f"exit {result.exit_code}: {to_text(outcome)}")
    return outcome
