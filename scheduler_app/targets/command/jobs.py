"""The hooks of the services (check) and of the worker (perform) for command jobs; the
program itself is run by running.py, which knows nothing of Django."""

from __future__ import annotations

import logging

from celery.signals import worker_init

from scheduler_app.conf import app_settings
from scheduler_app.targets.base import PermanentFailure, RetryableFailure, to_text
from scheduler_app.targets.command.isolation import CommandUserError, command_user, make_undumpable
from scheduler_app.targets.command.running import CommandNotStarted, InvalidCommand, build_argv, run_command
from scheduler_app.validation import InvalidInput

logger = logging.getLogger(__name__)


def check(spec, tenant: str | None = None) -> dict:
    """A job's command target ({"name", "params"}) as stored; InvalidInput naming command.<field>."""
    command = spec.command or {}
    name, params = command.get("name", ""), command.get("params") or {}
    if not isinstance(params, dict):
        raise InvalidInput("command.params", "must be an object")
    try:
        build_argv(name, params, app_settings.COMMANDS)
    except InvalidCommand as exc:
        raise InvalidInput(f"command.{exc.field}" if exc.field != "command" else "command", exc.message) from None
    return {"name": name, "params": params}


def perform(started) -> dict:
    """Run the job's allow-listed program; a non-zero exit, a timeout or too much written to
    disk is a retryable failure; a command user the worker cannot switch to, a program the
    command user cannot start, or a refused command is permanent (never run as the worker)."""
    run, job = started.run, started.job
    config = job.target_config
    try:
        result = run_command(
            config.get("name", ""),
            config.get("params") or {},
            config=app_settings.COMMANDS,
            timeout=job.timeout_seconds,
            runs_dir=app_settings.COMMAND_CWD,
            max_output_bytes=app_settings.RESULT_MAX_BYTES,
            max_disk_bytes=app_settings.COMMAND_MAX_DISK_BYTES,
            user=command_user(app_settings.COMMAND_USER),
            env_extra={
                "CRONFLEET_FIRE_KEY": run.fire_key,
                "CRONFLEET_ATTEMPT": str(run.attempt),
                "CRONFLEET_SCHEDULED_AT": run.scheduled_at.isoformat(),
            },
        )
    except CommandUserError as exc:
        raise PermanentFailure(f"command_user: {exc}") from None
    except CommandNotStarted as exc:
        raise PermanentFailure(f"command_not_started: {exc}") from None
    except InvalidCommand as exc:
        raise PermanentFailure(f"invalid_command: {exc}") from None
    outcome = {
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "truncated": result.truncated,
        "elapsed_ms": round(result.elapsed * 1000),
    }
    if result.timed_out:
        raise RetryableFailure(f"timeout: killed after {job.timeout_seconds}s: {to_text(outcome)}")
    if result.disk_exceeded:
        raise RetryableFailure(
            f"disk_limit: the run held more than {app_settings.COMMAND_MAX_DISK_BYTES} "
            f"bytes in its directory and was stopped: {to_text(outcome)}"
        )
    if result.exit_code != 0:
        raise RetryableFailure(f"exit {result.exit_code}: {to_text(outcome)}")
    return outcome


@worker_init.connect
def harden_worker(**kwargs) -> None:
    """At a worker's start, in its main process before the pool processes are forked (they
    inherit it): make it non-dumpable, so no command of its own user can read its memory or
    environment (isolation.make_undumpable()); and refuse to start when commands are to run
    as CRONFLEET_COMMAND_USER but cannot be, rather than fail every command run later.

    SystemExit, because Celery logs and ignores an Exception raised by a signal handler.
    """
    make_undumpable()
    try:
        command_user(app_settings.COMMAND_USER)
    except CommandUserError as exc:
        logger.critical("CRONFLEET_COMMAND_USER: %s", exc)
        raise SystemExit(f"CRONFLEET_COMMAND_USER: {exc}") from None
