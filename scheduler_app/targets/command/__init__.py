"""Command jobs: a program named in the allow-list CRONFLEET_COMMANDS, run without a shell."""

from scheduler_app.targets.command.jobs import check, perform
from scheduler_app.targets.command.running import (
    CommandResult,
    InvalidCommand,
    build_argv,
    run_command,
    validate_config,
)

__all__ = ["CommandResult", "InvalidCommand", "build_argv", "check", "perform", "run_command", "validate_config"]
