"""Command jobs: a program named in the allow-list CRONFLEET_COMMANDS, run without a shell,
as CRONFLEET_COMMAND_USER when set, in a directory of its own, under a supervisor."""

from scheduler_app.targets.command.isolation import CommandUser, CommandUserError, check_user_name, command_user
from scheduler_app.targets.command.jobs import check, perform
from scheduler_app.targets.command.running import (
    CommandNotStarted,
    CommandResult,
    InvalidCommand,
    build_argv,
    run_command,
    validate_config,
)

__all__ = [
    "CommandNotStarted",
    "CommandResult",
    "CommandUser",
    "CommandUserError",
    "InvalidCommand",
    "build_argv",
    "check",
    "check_user_name",
    "command_user",
    "perform",
    "run_command",
    "validate_config",
]
