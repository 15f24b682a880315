"""Create, inspect and operate jobs from the command line: `manage.py jobs ACTION ...`.

Every write goes through scheduler_app.services. Input is parsed and checked before
anything is written; a bad value ends the command with one line on stderr naming the
field (`jobs add: cron: ...`) and exit status 2.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import JSONField, OuterRef, Subquery

from scheduler_app import schedules, services, validation
from scheduler_app.management.tables import (
    OneLineErrors,
    cell,
    describe_schedule,
    fires_table,
    format_table,
    shorten,
    utc_text,
)
from scheduler_app.models import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN, Job, JobRun, RunState, db_now

MAX_LIMIT = 1000
MAX_PREVIEW = 1000
SHOW_FIRES = 5
SHOW_RUNS = 10
ISO_HELP = ("ISO 8601 with a UTC offset, e.g. 2030-01-31T09:00:00+01:00 or 2030-01-31T08:00:00Z; "
            "a time without an offset is rejected, never guessed")
JOB_HELP = "a job id, or TENANT/NAME"
# The columns `jobs list` reads (no args, kwargs or description).
LIST_FIELDS = ("id", "name", "cron", "timezone", "every_seconds", "run_at", "enabled", "next_run_at",
               "tenant", "tenant__slug")
RUN_FIELDS = ("id", "scheduled_at", "trigger", "state", "attempt", "reason", "error", "started_at",
              "finished_at")


class Command(OneLineErrors, BaseCommand):
    help = "Manage jobs. Subcommands: add, list, show, pause, resume, trigger, preview, runs."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True,
                                    metavar="{add,list,show,pause,resume,trigger,preview,runs}")

        allowed = ", ".join(settings.CRONFLEET_ALLOWED_TASKS) or "(none)"
        add = sub.add_parser("add", help="Create a job", description=(
            "Create a job with exactly one schedule: --cron, --every or --at. Datetimes are " + ISO_HELP + "."))
        add.add_argument("--tenant", required=True, metavar="SLUG")
        add.add_argument("--name", required=True)
        when = add.add_mutually_exclusive_group(required=True)
        when.add_argument("--cron", metavar="EXPR", help="5-field cron expression or a nickname such as @daily")
        when.add_argument("--every", metavar="SECONDS", type=int, help="Fire every SECONDS, counted from now "
                          "(or from --start)")
        when.add_argument("--at", metavar="ISO8601", help="Fire once at this instant")
        add.add_argument("--timezone", metavar="ZONE", default="",
                         help="IANA zone the cron expression is read in (default: the tenant's zone)")
        target = add.add_mutually_exclusive_group(required=True)
        target.add_argument("--task", metavar="TASKNAME", help=f"Celery task to call ({allowed})")
        target.add_argument("--http-url", metavar="URL", help="Call this URL (a signed webhook)")
        target.add_argument("--command", dest="command_name", metavar="NAME",
                            help="Run this program from CRONFLEET_COMMANDS")
        add.add_argument("--method", default="POST", help="HTTP method for --http-url (default POST)")
        add.add_argument("--header", dest="http_headers", action="append", default=[], metavar="K:V",
                         help="HTTP header for --http-url (repeatable)")
        add.add_argument("--body", default="", help="HTTP request body for --http-url")
        add.add_argument("--param", dest="command_params", action="append", default=[], metavar="K=V",
                         help="Parameter for --command (repeatable; a repeated key makes a list)")
        add.add_argument("--args", dest="task_args", metavar="JSON", help="Positional arguments: a JSON array")
        add.add_argument("--kwargs", dest="task_kwargs", metavar="JSON", help="Keyword arguments: a JSON object")
        add.add_argument("--queue", default="", metavar="Q", help="Celery queue (default: the default queue)")
        add.add_argument("--priority", type=int, metavar="P",
                         help=f"{PRIORITY_MIN}-{PRIORITY_MAX}, higher goes first (default {PRIORITY_DEFAULT})")
        add.add_argument("--timeout", type=int, metavar="S", help="Seconds a run may take (default 300)")
        add.add_argument("--max-attempts", type=int, metavar="N", help="Attempts per run (default 3)")
        add.add_argument("--retry-backoff", type=int, metavar="S",
                         help="Seconds before the first retry, doubling after (default 10)")
        add.add_argument("--retry-backoff-max", type=int, metavar="S",
                         help="Longest wait between attempts (default 3600)")
        add.add_argument("--overlap", metavar="{allow,skip,buffer_one,replace}",
                         help="A fire while the previous run is still going (default allow)")
        add.add_argument("--jitter", type=int, metavar="S",
                         help="Move each fire later by a stable random 0..S-1 seconds (default 0)")
        add.add_argument("--misfire", metavar="{run_once,run_all,skip}",
                         help="What to do with fires missed while the beat was down (default run_once)")
        add.add_argument("--catchup-window", type=int, metavar="S",
                         help="Missed fires older than this are never run (default 86400)")
        add.add_argument("--run-all-cap", type=int, metavar="N",
                         help="run_all runs at most this many missed fires (default 100)")
        add.add_argument("--start", metavar="ISO", help="No fires before this instant")
        add.add_argument("--end", metavar="ISO", help="No fires after this instant")
        add.add_argument("--tag", dest="tags", action="extend", nargs="+", default=[], metavar="T",
                         help="Tags (repeatable)")
        add.add_argument("--description", default="", metavar="D")

        lst = sub.add_parser("list", help="List jobs by id, a page at a time")
        lst.add_argument("--tenant", metavar="SLUG", default="")
        lst.add_argument("--limit", type=int, default=50, metavar="N",
                         help=f"Jobs per page (1-{MAX_LIMIT}, default 50)")
        lst.add_argument("--after-id", type=int, default=0, metavar="ID", help="Start after this job id (next page)")

        show = sub.add_parser("show", help="Show a job, its next fires and its last runs")
        show.add_argument("job", metavar="JOB", help=JOB_HELP)

        pause = sub.add_parser("pause", help="Stop a job firing")
        pause.add_argument("job", metavar="JOB", help=JOB_HELP)
        pause.add_argument("--note", default="", metavar="TEXT", help="Why (kept until resumed, 500 characters)")

        resume = sub.add_parser("resume", help="Start a paused job again from now (missed fires are skipped)")
        resume.add_argument("job", metavar="JOB", help=JOB_HELP)

        trigger = sub.add_parser("trigger", help="Record a manual run now and publish it")
        trigger.add_argument("job", metavar="JOB", help=JOB_HELP)

        preview = sub.add_parser("preview", help="Show upcoming fire times of a job or of an unsaved schedule",
                                 description="Give JOB, or --cron EXPR [--timezone ZONE], or --every SECONDS.")
        preview.add_argument("job", metavar="JOB", nargs="?", help=JOB_HELP)
        unsaved = preview.add_mutually_exclusive_group()
        unsaved.add_argument("--cron", metavar="EXPR")
        unsaved.add_argument("--every", metavar="SECONDS", type=int, help="Counted from now, as for a new job")
        preview.add_argument("--timezone", metavar="ZONE", default="", help="Zone for --cron (default UTC)")
        preview.add_argument("-n", "--count", type=int, default=10, metavar="N",
                             help=f"How many fires (1-{MAX_PREVIEW}, default 10)")

        runs = sub.add_parser("runs", help="List a job's runs, newest first")
        runs.add_argument("job", metavar="JOB", help=JOB_HELP)
        runs.add_argument("--state", default="", metavar="STATE", help=", ".join(RunState.values))
        runs.add_argument("--limit", type=int, default=20, metavar="N", help=f"1-{MAX_LIMIT}, default 20")

    def handle(self, *args, action: str, **options) -> None:
        self.run_action("jobs", action, **options)

    # --- add ------------------------------------------------------------------------

    def do_add(self, *, tenant: str, name: str, cron: str | None, every: int | None, at: str | None,
               timezone: str, task: str | None, task_args: str | None, task_kwargs: str | None, queue: str,
               http_url: str | None, method: str, http_headers: list[str], body: str,
               command_name: str | None, command_params: list[str], priority: int | None,
               timeout: int | None, max_attempts: int | None, retry_backoff: int | None,
               retry_backoff_max: int | None, overlap: str | None, jitter: int | None, misfire: str | None,
               catchup_window: int | None, run_all_cap: int | None,
               start: str | None, end: str | None, tags: list[str], description: str, **options) -> None:
        # Parse every value before the first query: bad input writes nothing.
        defaults_overridden = {
            "priority": priority, "timeout_seconds": timeout, "max_attempts": max_attempts, "retry_backoff_seconds": retry_backoff,
            "retry_backoff_max_seconds": retry_backoff_max,
            "overlap_policy": overlap, "jitter_seconds": jitter,
            "misfire_policy": misfire, "catchup_window_seconds": catchup_window, "run_all_cap": run_all_cap,
        }
        if http_url is not None:
            target = {"target_kind": "http", "http": {"method": method, "url": http_url, "body": body,
                                                      "headers": parse_pairs("header", http_headers, ":")}}
        elif command_name is not None:
            target = {"target_kind": "command",
                      "command": {"name": command_name, "params": parse_params(command_name, command_params)}}
        else:
            target = {"target_kind": "task", "task_name": task}
        spec = services.JobSpec(
            name=name, cron=cron or "", timezone=timezone, every=every, **target,
            at=parse_instant("at", at), start_at=parse_instant("start_at", start),
            end_at=parse_instant("end_at", end),
            args=parse_json("args", task_args), kwargs=parse_json("kwargs", task_kwargs),
            queue=queue, description=description, tags=tags,
            **{key: value for key, value in defaults_overridden.items() if value is not None},
        )
        job = services.job_create(services.tenant_by_slug(tenant), spec, actor="cli")
        self.stdout.write(f"Created job {job.id}: {job.tenant.slug}/{job.name}")
        self.stdout.write(f"schedule: {schedule_text(job)}")
        self.stdout.write(f"target: {target_text(job)}")
        if job.next_run_at is None:
            self.stdout.write("next fires: none (the schedule has no fire left)")
            return
        fires = services.job_preview(job, count=SHOW_FIRES, after=job.next_run_at - timedelta(microseconds=1))
        self.stdout.write("next fires:")
        self.stdout.write(fires_table(fires, job.timezone))

    # --- list / show / runs ---------------------------------------------------------

    def do_list(self, *, tenant: str, limit: int, after_id: int, **options) -> None:
        check_range("limit", limit, 1, MAX_LIMIT)
        check_range("after_id", after_id, 0, 2**63 - 1)
        jobs = (Job.objects.select_related("tenant").only(*LIST_FIELDS)
                .annotate(last_run_state=last_run_state()).order_by("id"))
        if tenant:
            jobs = jobs.filter(tenant=services.tenant_by_slug(tenant))
        if after_id:
            jobs = jobs.filter(id__gt=after_id)
        page = list(jobs[: limit + 1])
        more, page = len(page) > limit, page[:limit]
        if not page:
            self.stdout.write("(no jobs)")
            return
        rows = [
            (job.id, job.tenant.slug, job.name, schedule_text(job), "enabled" if job.enabled else "paused",
             job.next_run_at, job.last_run_state)
            for job in page
        ]
        self.stdout.write(format_table(["id", "tenant", "name", "schedule", "status", "next_run_at", "last run"],
                                       rows))
        if more:
            self.stdout.write(f"(more jobs: --after-id {page[-1].id})")

    def do_show(self, *, job: str, **options) -> None:
        job = find_job(job)
        pairs: list[tuple[str, object]] = []
        for field in Job._meta.concrete_fields:
            value = getattr(job, field.name)
            if field.name == "tenant":
                value = job.tenant.slug
            elif isinstance(field, JSONField):
                value = json.dumps(value, ensure_ascii=False)
            elif isinstance(value, bool):
                value = "yes" if value else "no"
            pairs.append((field.name, value))
            if field.name == "name":
                pairs += [("schedule", schedule_text(job)), ("status", "enabled" if job.enabled else "paused")]
        width = max(len(key) for key, _ in pairs)
        for key, value in pairs:
            self.stdout.write(f"{key.ljust(width)}  {cell(value)}")

        fires = services.job_preview(job, count=SHOW_FIRES)
        self.stdout.write("")
        note = "" if job.enabled else " (paused: these fire only if the job is resumed before them)"
        self.stdout.write(f"next {SHOW_FIRES} fires{note}:")
        self.stdout.write(fires_table(fires, job.timezone) if fires else "(no fires left)")

        self.stdout.write("")
        self.stdout.write(f"last {SHOW_RUNS} runs:")
        self.stdout.write(runs_table(recent_runs(job, limit=SHOW_RUNS)))

    def do_runs(self, *, job: str, state: str, limit: int, **options) -> None:
        check_range("limit", limit, 1, MAX_LIMIT)
        if state and state not in RunState.values:
            raise services.InvalidInput("state", f"must be one of {', '.join(RunState.values)}")
        job = find_job(job)
        self.stdout.write(runs_table(recent_runs(job, limit=limit, state=state)))

    # --- pause / resume / trigger ---------------------------------------------------

    def do_pause(self, *, job: str, note: str, **options) -> None:
        job = find_job(job)
        was_enabled = job.enabled
        job = services.job_pause(job, note=note, actor="cli")
        if was_enabled:
            self.stdout.write(f"Paused job {job_label(job)}.")
        else:
            self.stdout.write(f"Job {job_label(job)} was already paused.")

    def do_resume(self, *, job: str, **options) -> None:
        job = find_job(job)
        was_enabled = job.enabled
        job = services.job_resume(job, actor="cli")
        if was_enabled:
            self.stdout.write(f"Job {job_label(job)} was not paused; next run at {utc_text(job.next_run_at)}.")
        else:
            self.stdout.write(f"Resumed job {job_label(job)}; next run at {utc_text(job.next_run_at)}.")

    def do_trigger(self, *, job: str, **options) -> None:
        job = find_job(job)
        run, publish_error = services.job_trigger_reporting(job, actor="cli")
        self.stdout.write(f"Triggered job {job_label(job)}: run {run.id} ({run.state}, {run.trigger}) "
                          f"at {utc_text(run.scheduled_at)}.")
        if publish_error is not None:
            raise CommandError(f"jobs trigger: publish: run {run.id} is recorded but was not sent to the broker "
                               f"({shorten(str(publish_error), 200)})", returncode=1)

    # --- preview --------------------------------------------------------------------

    def do_preview(self, *, job: str | None, cron: str | None, every: int | None, timezone: str, count: int,
                   **options) -> None:
        check_range("count", count, 1, MAX_PREVIEW)
        if sum(value is not None for value in (job, cron, every)) != 1:
            raise services.InvalidInput("schedule", "give JOB, or --cron EXPR, or --every SECONDS")
        now = db_now()
        if job is not None:
            if timezone:
                raise services.InvalidInput("timezone", "applies to --cron only; a saved job uses its own zone")
            found = find_job(job)
            title, zone_name, target = f"job {job_label(found)}: {schedule_text(found)}", found.timezone, found
        else:
            try:
                target = schedules.validate(schedules.Schedule(
                    cron=cron or "", timezone=timezone or "UTC", every=every,
                    anchor=now.replace(microsecond=0) if every is not None else None,
                ))
            except schedules.InvalidSchedule as exc:
                raise services.InvalidInput(exc.field, exc.message) from None
            title, zone_name = target.describe(), target.timezone
        fires = services.job_preview(target, count=count, after=now)
        self.stdout.write(f"next {count} fires of {title}:")
        self.stdout.write(fires_table(fires, zone_name) if fires else "(no fires left)")


# --- helpers --------------------------------------------------------------------------


def check_range(field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise services.InvalidInput(field, f"must be between {low} and {high}")
    return value


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
        raise services.InvalidInput(field, f"{text!r} has no UTC offset (naive times are refused); "
                                           f"write e.g. {value.isoformat()}Z or {value.isoformat()}+01:00")
    return value


def _no_constant(name: str):
    raise ValueError(name)


def parse_json(field: str, text: str | None):
    """JSON as PostgreSQL's jsonb can store it (no NaN or Infinity, no NUL characters)."""
    if text is None:
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise services.InvalidInput(field, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") \
            from None
    except ValueError as exc:
        raise services.InvalidInput(field, f"{exc} is not allowed in JSON") from None
    if "\\u0000" in json.dumps(value):
        raise services.InvalidInput(field, "must not contain NUL (\\u0000) characters")
    return value


def find_job(ref: str) -> Job:
    """The job named by `ref`: its id, or TENANT/NAME (the name may contain '/')."""
    ref = ref.strip()
    jobs = Job.objects.select_related("tenant")
    if ref.isascii() and ref.isdigit() and len(ref) <= 18:
        job = jobs.filter(id=int(ref)).first()
    elif "/" in ref:
        slug, _, name = ref.partition("/")
        job = jobs.filter(tenant__slug=slug, name=name).first()
    else:
        raise services.InvalidInput("job", f"{ref!r} is neither a job id nor TENANT/NAME")
    if job is None:
        raise services.InvalidInput("job", f"no job {ref!r}")
    return job


def job_label(job: Job) -> str:
    return f"{job.id} ({job.tenant.slug}/{job.name})"


def schedule_text(job: Job) -> str:
    return describe_schedule(job.cron, job.timezone, job.every_seconds, job.run_at)


def last_run_state() -> Subquery:
    """The state of a job's latest run (by fire time), for annotating a page of jobs.

    Each row costs one probe of the (job, scheduled_at) unique index, never a join over runs.
    """
    latest = JobRun.objects.filter(job=OuterRef("pk")).order_by("-scheduled_at").values("state")[:1]
    return Subquery(latest)


def recent_runs(job: Job, *, limit: int, state: str = "") -> list[JobRun]:
    runs = JobRun.objects.filter(job=job).order_by("-scheduled_at").only(*RUN_FIELDS)
    if state:
        runs = runs.filter(state=state)
    return list(runs[:limit])


def runs_table(runs: list[JobRun]) -> str:
    if not runs:
        return "(no runs)"
    rows = [
        (run.id, run.scheduled_at, run.trigger, run.state, run.attempt, shorten(run.reason or run.error, 60),
         run.started_at, run.finished_at)
        for run in runs
    ]
    return format_table(["id", "scheduled_at", "trigger", "state", "attempt", "reason/error", "started", "finished"],
                        rows)



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
    specs = (settings.CRONFLEET_COMMANDS.get(command) or {}).get("params") or {}
    params: dict[str, object] = {}
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


def target_text(job: Job) -> str:
    if job.target_kind == "http":
        return f"http {job.target_config.get('method')} {job.target_config.get('url')}"
    if job.target_kind == "command":
        return f"command {job.target_config.get('name')} {job.target_config.get('params')}"
    return f"task {job.task_name}"
