"""The options that describe a job on the command line, shared by `jobs add` and `jobs edit`.

add_job_options() declares them; job_fields() turns the options given into JobSpec fields
(services.JobSpec for add, the `changes` of services.job_update for edit). Every option
defaults to None, meaning "not given": add falls back to JobSpec's defaults, edit keeps the
job's value. Nothing here touches the database.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from django.core.management.base import CommandError, CommandParser

from scheduler_app import services, validation
from scheduler_app.conf import app_settings
from scheduler_app.models import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN, Job, TargetKind
from scheduler_app.targets import sql as sqljobs

ISO_HELP = (
    "ISO 8601 with a UTC offset, e.g. 2030-01-31T09:00:00+01:00 or 2030-01-31T08:00:00Z; "
    "a time without an offset is rejected, never guessed"
)
SCHEDULE_OPTIONS = {"cron": "--cron", "every": "--every", "at": "--at"}
TARGET_OPTIONS = {
    "task": "--task",
    "http_url": "--http-url",
    "command_name": "--command",
    "sql_name": "--sql",
    "monitor": "--monitor",
}
# option dest -> JobSpec field, for options taken as they are.
PLAIN_OPTIONS = {
    "name": "name",
    "timezone": "timezone",
    "queue": "queue",
    "priority": "priority",
    "timeout": "timeout_seconds",
    "max_attempts": "max_attempts",
    "retry_backoff": "retry_backoff_seconds",
    "retry_backoff_max": "retry_backoff_max_seconds",
    "overlap": "overlap_policy",
    "jitter": "jitter_seconds",
    "misfire": "misfire_policy",
    "catchup_window": "catchup_window_seconds",
    "run_all_cap": "run_all_cap",
    "description": "description",
    "tags": "tags",
    "batch": "batch",
    "calendar": "calendar",
    "calendar_policy": "calendar_policy",
    "window": "flex_window",
    "window_scope": "flex_scope",
}
CLEAR = "none"  # `jobs edit --start none` removes the start


def add_job_options(parser: CommandParser, *, edit: bool) -> None:
    """Declare the job options on `parser` (`jobs add`, or `jobs edit` when `edit`)."""
    keep = " (not given: unchanged)" if edit else ""
    if not edit:
        parser.add_argument("--tenant", required=True, metavar="SLUG")
    parser.add_argument("--name", required=not edit, help="A new name" if edit else None)
    parser.add_argument("--cron", metavar="EXPR", help="5-field cron expression or a nickname such as @daily")
    parser.add_argument(
        "--every", metavar="SECONDS", type=int, help="Fire every SECONDS, counted from now (or from --start)"
    )
    parser.add_argument("--at", metavar="ISO8601", help="Fire once at this instant")
    parser.add_argument(
        "--window",
        metavar="WINDOW",
        help="A flexible window instead of a fixed time: 'daily HH:MM-HH:MM' (e.g. 'daily 01:00-03:00', "
        "across midnight allowed), 'daily' or 'hourly'; the job fires once in it, at the minute "
        "where its scope's planned fires are fewest (docs/flexible-windows.md)",
    )
    parser.add_argument(
        "--window-scope",
        metavar="{tenant,queue}",
        help="Whose planned fires a --window avoids: the tenant's (default) or those of the queue",
    )
    parser.add_argument(
        "--timezone",
        metavar="ZONE",
        help="IANA zone the cron expression (or the window) is read in (default: the tenant's zone)",
    )
    allowed = ", ".join(app_settings.ALLOWED_TASKS).replace("%", "%%") or "(none)"  # argparse formats help with %
    parser.add_argument(
        "--task",
        metavar="TASKNAME",
        help=f"Celery task to call, one CRONFLEET_ALLOWED_TASKS allows (names or patterns: {allowed})",
    )
    parser.add_argument("--http-url", metavar="URL", help="Call this URL (a signed webhook)")
    parser.add_argument(
        "--command", dest="command_name", metavar="NAME", help="Run this program from CRONFLEET_COMMANDS"
    )
    parser.add_argument("--sql", dest="sql_name", metavar="NAME", help="Run this statement from CRONFLEET_SQL")
    parser.add_argument(
        "--monitor",
        action="store_const",
        const=True,
        default=None,
        help="Run nothing: monitor a job run elsewhere, which pings its check-in URL (docs/check-ins.md)",
    )
    parser.add_argument(
        "--grace",
        type=int,
        metavar="SECONDS",
        help="A monitored job's grace: how long after a fire (or a /start) its success may come (default 300)",
    )
    parser.add_argument("--method", help="HTTP method of an HTTP job (default POST)")
    parser.add_argument(
        "--header",
        dest="http_headers",
        action="append",
        metavar="K:V",
        help="HTTP header of an HTTP job (repeatable" + ("; replaces all headers)" if edit else ")"),
    )
    parser.add_argument("--body", help="HTTP request body of an HTTP job")
    parser.add_argument(
        "--param",
        dest="command_params",
        action="append",
        metavar="K=V",
        help="Parameter of a command or SQL job (repeatable; a repeated key makes a list"
        + ("; replaces all parameters)" if edit else ")"),
    )
    parser.add_argument("--args", dest="task_args", metavar="JSON", help="Positional arguments: a JSON array")
    parser.add_argument("--kwargs", dest="task_kwargs", metavar="JSON", help="Keyword arguments: a JSON object")
    parser.add_argument("--queue", metavar="Q", help="Celery queue (default: the default queue)")
    parser.add_argument(
        "--priority",
        type=int,
        metavar="P",
        help=f"{PRIORITY_MIN}-{PRIORITY_MAX}, higher goes first (default {PRIORITY_DEFAULT})",
    )
    parser.add_argument("--timeout", type=int, metavar="S", help="Seconds a run may take (default 300)")
    parser.add_argument(
        "--batch",
        action=argparse.BooleanOptionalAction,
        help="Send runs to workers in batches: short, idempotent targets only (default: no)",
    )
    parser.add_argument("--max-attempts", type=int, metavar="N", help="Attempts per run (default 3)")
    parser.add_argument(
        "--retry-backoff", type=int, metavar="S", help="Seconds before the first retry, doubling after (default 10)"
    )
    parser.add_argument(
        "--retry-backoff-max", type=int, metavar="S", help="Longest wait between attempts (default 3600)"
    )
    parser.add_argument(
        "--overlap",
        metavar="{allow,skip,buffer_one,replace}",
        help="A fire while the previous run is still going (default allow)",
    )
    parser.add_argument(
        "--jitter", type=int, metavar="S", help="Move each fire later by a stable random 0..S-1 seconds (default 0)"
    )
    parser.add_argument(
        "--misfire",
        metavar="{run_once,run_all,skip}",
        help="What to do with fires missed while the beat was down (default run_once)",
    )
    parser.add_argument(
        "--catchup-window", type=int, metavar="S", help="Missed fires older than this are never run (default 86400)"
    )
    parser.add_argument(
        "--run-all-cap", type=int, metavar="N", help="run_all runs at most this many missed fires (default 100)"
    )
    parser.add_argument(
        "--calendar",
        metavar="NAME",
        help="A business-day calendar of the tenant (manage.py calendars)"
        + (f"; '{CLEAR}' removes it" if edit else ""),
    )
    parser.add_argument(
        "--calendar-policy",
        metavar="{skip,next_business_day,previous_business_day}",
        help="A fire on a non-business day of the calendar (default skip)",
    )
    clear = f"; '{CLEAR}' removes it" if edit else ""
    parser.add_argument(
        "--pause-after-failures",
        metavar="N",
        help=f"Pause the job after N failed or dead runs in a row (default: never){clear}",
    )
    parser.add_argument(
        "--after-job",
        metavar="NAME",
        help="Chains: run when a run of this job of the tenant ends, instead of a schedule"
        + (f"; '{CLEAR}' unchains it (give a schedule then)" if edit else ""),
    )
    parser.add_argument(
        "--after-states",
        metavar="STATES",
        help="With --after-job: the parent's end states that start this job, comma-separated "
        "among succeeded, failed, dead (default succeeded)",
    )
    parser.add_argument("--start", metavar="ISO", help=f"No fires before this instant{clear}")
    parser.add_argument("--end", metavar="ISO", help=f"No fires after this instant{clear}")
    parser.add_argument(
        "--tag",
        dest="tags",
        action="extend",
        nargs="+",
        metavar="T",
        help="Tags (repeatable" + ("; replaces all tags)" if edit else ")"),
    )
    parser.add_argument("--description", metavar="D", help="Free text" + keep)


def check_one_of(command: str, options: dict, names: dict[str, str], *, required: bool) -> None:
    """Refuse two of the options `names` (or none, when `required`) in one line, exit 2."""
    given = [flag for dest, flag in names.items() if options.get(dest) is not None]
    if len(given) > 1 or (required and not given):
        listed = ", ".join(names.values())
        raise CommandError(f"{command}: give {'exactly' if required else 'at most'} one of {listed}", returncode=2)


def check_schedule_options(command: str, options: dict, *, required: bool) -> None:
    """Refuse two schedules in one line (or none, when `required`), exit 2: one of --cron,
    --every, --at, or a --window (docs/flexible-windows.md) instead of them."""
    fixed = [flag for dest, flag in SCHEDULE_OPTIONS.items() if options.get(dest) is not None]
    if options.get("window") is not None and fixed:
        raise CommandError(
            f"{command}: give --window or one of --cron, --every, --at, not both ({fixed[0]})", returncode=2
        )
    if options.get("window") is None:
        check_one_of(command, options, SCHEDULE_OPTIONS, required=required)


def job_fields(options: dict, current: Job | None = None) -> dict:
    """JobSpec fields from the options given; `current` is the job an edit changes.

    Raises InvalidInput naming the field for a value that does not parse.
    """
    fields = {field: options[dest] for dest, field in PLAIN_OPTIONS.items() if options.get(dest) is not None}
    if current is not None and str(fields.get("calendar", "")).strip().lower() == CLEAR:
        fields["calendar"] = ""
    if options.get("cron") is not None:
        fields["cron"] = options["cron"]
    if options.get("every") is not None:
        fields["every"] = options["every"]
    if options.get("at") is not None:
        fields["at"] = parse_instant("at", options["at"])
    for dest, field in (("start", "start_at"), ("end", "end_at")):
        text = options.get(dest)
        if text is not None:
            clear = current is not None and text.strip().lower() == CLEAR
            fields[field] = None if clear else parse_instant(field, text)
    if options.get("task_args") is not None:
        fields["args"] = parse_json("args", options["task_args"])
    if options.get("task_kwargs") is not None:
        fields["kwargs"] = parse_json("kwargs", options["task_kwargs"])
    if options.get("pause_after_failures") is not None:
        fields["pause_after_failures"] = parse_count("pause_after_failures", options["pause_after_failures"])
    if options.get("after_job") is not None:
        text = options["after_job"].strip()
        fields["after_job"] = "" if current is not None and text.lower() == CLEAR else text
    if options.get("after_states") is not None:
        fields["after_states"] = [state.strip() for state in options["after_states"].split(",") if state.strip()]
    fields.update(target_fields(options, current))
    return fields


def target_fields(options: dict, current: Job | None) -> dict:
    """The target of the job: a new one (--task, --http-url, --command, --sql), or the current
    HTTP, command or SQL job's settings with the options given replacing theirs."""
    kind = current.target_kind if current is not None else None
    config = dict(current.target_config) if current is not None else {}
    http_given = [
        flag
        for dest, flag in (("method", "--method"), ("http_headers", "--header"), ("body", "--body"))
        if options.get(dest) is not None
    ]
    if options.get("task") is not None:
        fields = {"target_kind": TargetKind.TASK.value, "task_name": options["task"]}
    elif options.get("http_url") is not None or (http_given and kind == TargetKind.HTTP):
        base = config if kind == TargetKind.HTTP else {}
        headers = options.get("http_headers")
        fields = {
            "target_kind": TargetKind.HTTP.value,
            "http": {
                "method": options.get("method") or base.get("method", "POST"),
                "url": options.get("http_url") or base.get("url"),
                "headers": parse_pairs("header", headers, ":") if headers is not None else base.get("headers", {}),
                "body": options["body"] if options.get("body") is not None else base.get("body", ""),
            },
        }
    elif options.get("command_name") is not None or (
        options.get("command_params") is not None and kind == TargetKind.COMMAND
    ):
        base = config if kind == TargetKind.COMMAND else {}
        name = options.get("command_name") or base.get("name", "")
        params = options.get("command_params")
        if params is not None:
            params = parse_params(name, params)
        else:  # the same program keeps its parameters; another one starts with none
            params = base.get("params", {}) if name == base.get("name") else {}
        fields = {"target_kind": TargetKind.COMMAND.value, "command": {"name": name, "params": params}}
    elif options.get("sql_name") is not None or (options.get("command_params") is not None and kind == TargetKind.SQL):
        base = config if kind == TargetKind.SQL else {}
        name = options.get("sql_name") or base.get("name", "")
        params = options.get("command_params")
        if params is not None:
            params = sqljobs.parse_cli_params(name, params, app_settings.SQL)
        else:  # the same statement keeps its parameters; another one starts with none
            params = base.get("params", {}) if name == base.get("name") else {}
        fields = {"target_kind": TargetKind.SQL.value, "sql": {"name": name, "params": params}}
    elif options.get("monitor") or (options.get("grace") is not None and kind == TargetKind.MONITOR):
        grace = options.get("grace")
        base = config if kind == TargetKind.MONITOR else {}
        fields = {
            "target_kind": TargetKind.MONITOR.value,
            "monitor": {"grace_seconds": grace if grace is not None else base.get("grace_seconds", 300)},
        }
    else:
        fields = {}
    if options.get("grace") is not None and fields.get("target_kind") != TargetKind.MONITOR:
        raise services.InvalidInput("grace", "--grace is for monitored jobs only (--monitor)")
    if http_given and fields.get("target_kind") != TargetKind.HTTP:
        verb = "is" if len(http_given) == 1 else "are"
        raise services.InvalidInput("http", f"{' and '.join(http_given)} {verb} for HTTP jobs only (--http-url)")
    if options.get("command_params") is not None and fields.get("target_kind") not in (
        TargetKind.COMMAND,
        TargetKind.SQL,
    ):
        raise services.InvalidInput("command", "--param is for command and SQL jobs only (--command, --sql)")
    return fields


def parse_instant(field: str, text: str | None) -> datetime | None:
    """An aware datetime from ISO 8601 text; a value without a UTC offset is refused."""
    if text is None:
        return None
    validation.check_instant_text(field, text)
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise services.InvalidInput(field, f"{text!r} is not an ISO 8601 date and time") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise services.InvalidInput(
            field,
            f"{text!r} has no UTC offset (naive times are refused); "
            f"write e.g. {value.isoformat()}Z or {value.isoformat()}+01:00",
        )
    return value


def parse_count(field: str, text: str) -> int | None:
    """A whole number from the command line, or None for 'none' (the services check its range)."""
    if text.strip().lower() == CLEAR:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise services.InvalidInput(field, f"{text!r} is not a whole number (or '{CLEAR}')") from None


def _no_constant(name: str):
    raise ValueError(name)


def parse_json(field: str, text: str | None):
    """JSON as PostgreSQL's jsonb can store it (no NaN or Infinity, no NUL characters)."""
    if text is None:
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise services.InvalidInput(
            field, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except ValueError as exc:
        raise services.InvalidInput(field, f"{exc} is not allowed in JSON") from None
    if "\\u0000" in json.dumps(value):
        raise services.InvalidInput(field, "must not contain NUL (\\u0000) characters")
    return value


def parse_pairs(field: str, items: list[str], separator: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, found, value = item.partition(separator)
        if not found or not key.strip():
            raise services.InvalidInput(field, f"{item!r} is not KEY{separator}VALUE")
        pairs[key.strip()] = value.strip() if separator == ":" else value
    return pairs


def parse_params(command: str, items: list[str]) -> dict[str, object]:
    """K=V pairs; a key given twice becomes a list (for list parameters); values of the
    command's int parameters become numbers."""
    specs = (app_settings.COMMANDS.get(command) or {}).get("params") or {}
    params: dict[str, object] = {}
    value: str | int
    for item in items:
        key, found, value = item.partition("=")
        if not found or not key:
            raise services.InvalidInput("param", f"{item!r} is not KEY=VALUE")
        if (specs.get(key) or {}).get("type") == "int":
            try:
                value = int(value)
            except ValueError:
                raise services.InvalidInput(f"command.params.{key}", f"{value!r} is not a whole number") from None
        if key in params:
            previous = params[key]
            params[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            params[key] = value
    return params
