"""Create, inspect and operate jobs from the command line: `manage.py jobs ACTION ...`.

Every write goes through scheduler_app.services. Input is parsed and checked before
anything is written; a bad value ends the command with one line on stderr naming the
field (`jobs add: cron: ...`) and exit status 2.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import JSONField

from scheduler_app import hints, schedules, services
from scheduler_app.conf import app_settings
from scheduler_app.management.joboptions import (
    ISO_HELP,
    TARGET_OPTIONS,
    add_job_options,
    check_one_of,
    check_schedule_options,
    job_fields,
    parse_instant,
)
from scheduler_app.management.jobtext import (
    JOB_HELP,
    change_text,
    check_range,
    cron_time,
    find_job,
    job_label,
    last_run_state,
    no_fires_text,
    recent_runs,
    runs_table,
    schedule_text,
    status_text,
    target_text,
)
from scheduler_app.management.pausing import add_pause_options, cli_actor, pause_end, paused_table
from scheduler_app.management.tables import (
    OneLineErrors,
    cell,
    fires_table,
    format_table,
    plural,
    preview_table,
    shorten,
    utc_text,
)
from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now

MAX_LIMIT = 1000
MAX_PREVIEW = 1000
SHOW_FIRES = 5
SHOW_RUNS = 10
# The columns `jobs list` reads (no args, kwargs or description).
LIST_FIELDS = (
    "id",
    "name",
    "cron",
    "timezone",
    "every_seconds",
    "run_at",
    "enabled",
    "next_run_at",
    "flex_window",
    "tenant",
    "tenant__slug",
    "auto_paused_at",
    "after_job",
    "after_job__name",
    "after_states",
)
# Runs a deletion cuts short: their results will never be recorded.
ACTIVE_STATES = (RunState.PENDING, RunState.QUEUED, RunState.RUNNING, RunState.RETRYING)
ACTIONS = "{add,edit,delete,list,show,pause,paused,resume,trigger,preview,runs,rebalance}"


class Command(OneLineErrors, BaseCommand):
    help = (
        "Manage jobs. Subcommands: add, edit, delete, list, show, pause, paused, resume, trigger, preview, runs, "
        "rebalance."
    )
    # call_command("jobs", "edit", ..., stdin=...) answers the confirmation from a file (tests).
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar=ACTIONS)

        add = sub.add_parser(
            "add",
            help="Create a job",
            description=(
                "Create a job with exactly one schedule: --cron, --every or --at. Datetimes are " + ISO_HELP + "."
            ),
        )
        add_job_options(add, edit=False)

        edit = sub.add_parser(
            "edit",
            help="Change a job: shows the next fires before and after, then asks",
            description="Change the options given and keep the others. Giving one of --cron, "
            "--every or --at replaces the schedule. Shows what the edit does to the "
            "next fires and asks before saving (--yes: do not ask). Datetimes are " + ISO_HELP + ".",
        )
        edit.add_argument("job", metavar="JOB", help=JOB_HELP)
        add_job_options(edit, edit=True)
        edit.add_argument("--yes", action="store_true", help="Save without asking")

        delete = sub.add_parser("delete", help="Delete a job and its runs (asks first)")
        delete.add_argument("job", metavar="JOB", help=JOB_HELP)
        delete.add_argument("--yes", action="store_true", help="Delete without asking")

        lst = sub.add_parser("list", help="List jobs by id, a page at a time")
        lst.add_argument("--tenant", metavar="SLUG", default="")
        lst.add_argument(
            "--limit", type=int, default=50, metavar="N", help=f"Jobs per page (1-{MAX_LIMIT}, default 50)"
        )
        lst.add_argument("--after-id", type=int, default=0, metavar="ID", help="Start after this job id (next page)")

        show = sub.add_parser("show", help="Show a job, its next fires and its last runs")
        show.add_argument("job", metavar="JOB", help=JOB_HELP)

        pause = sub.add_parser("pause", help="Stop a job firing (until an end, with --until or --for)")
        pause.add_argument("job", metavar="JOB", help=JOB_HELP)
        add_pause_options(pause)
        pause.add_argument("--by", metavar="NAME", help="Who pauses (recorded as cli:NAME; default cli)")

        paused = sub.add_parser("paused", help="List the paused jobs: why, who, for how long, until when")
        paused.add_argument("--tenant", metavar="SLUG", default="")

        resume = sub.add_parser("resume", help="Start a paused job again from now (missed fires are skipped)")
        resume.add_argument("job", metavar="JOB", help=JOB_HELP)

        trigger = sub.add_parser("trigger", help="Record a manual run now and publish it")
        trigger.add_argument("job", metavar="JOB", help=JOB_HELP)

        preview = sub.add_parser(
            "preview",
            help="Show upcoming fire times of a job or of an unsaved schedule",
            description="Give JOB, or --cron EXPR [--timezone ZONE], or --every SECONDS.",
        )
        preview.add_argument("job", metavar="JOB", nargs="?", help=JOB_HELP)
        preview.add_argument("--cron", metavar="EXPR")
        preview.add_argument(
            "--every", metavar="SECONDS", type=int, help="Counted from now (or --start), as for a new job"
        )
        preview.add_argument("--timezone", metavar="ZONE", default="", help="Zone for --cron (default UTC)")
        preview.add_argument(
            "--start",
            metavar="ISO",
            help="A job's fires from this instant on; for --cron or "
            "--every, the schedule's start (no fires before it; an interval counts from it), "
            "as the API's start_at",
        )
        preview.add_argument("--end", metavar="ISO", help="For --cron or --every: no fires after this instant")
        preview.add_argument(
            "-n", "--count", type=int, default=10, metavar="N", help=f"How many fires (1-{MAX_PREVIEW}, default 10)"
        )

        rebalance = sub.add_parser(
            "rebalance",
            help="Place flexible-window jobs again at their windows' least loaded minutes",
            description="Place every enabled job with a --window again, one by one in the order they were made, "
            "against the other jobs of its scope (docs/flexible-windows.md), and print each move as "
            "old -> new time. A job edited meanwhile keeps its edit.",
        )
        rebalance.add_argument("--tenant", metavar="SLUG", default="", help="Only this tenant's jobs")
        rebalance.add_argument(
            "--queue", metavar="Q", default=None, help="Only the jobs of this queue ('' for the default queue)"
        )
        rebalance.add_argument("--dry-run", action="store_true", help="Print the moves, save nothing")

        runs = sub.add_parser("runs", help="List a job's runs, newest first")
        runs.add_argument("job", metavar="JOB", help=JOB_HELP)
        runs.add_argument("--state", default="", metavar="STATE", help=", ".join(RunState.values))
        runs.add_argument("--limit", type=int, default=20, metavar="N", help=f"1-{MAX_LIMIT}, default 20")

    def handle(self, *args, action: str, **options) -> None:
        self.stdin = options.pop("stdin", None)
        self.run_action("jobs", action, **options)

    # --- add ------------------------------------------------------------------------

    def do_add(self, *, tenant: str, **options) -> None:
        check_schedule_options("jobs add", options, required=not options.get("after_job"))  # chains: none
        check_one_of("jobs add", options, TARGET_OPTIONS, required=True)
        # Parse every value before the first query: bad input writes nothing.
        spec = services.JobSpec(**job_fields(options))
        job = services.job_create(services.tenant_by_slug(tenant), spec, actor="cli")
        self.stdout.write(f"Created job {job.id}: {job.tenant.slug}/{job.name}")
        if warning := hints.unconsumed_warning(job.queue, db_now()):
            self.stderr.write(warning)
        self.stdout.write(f"schedule: {schedule_text(job)}")
        if job.flex_window:
            self.stdout.write(f"placement: {job.flex_note}")
        self.stdout.write(f"target: {target_text(job)}")
        if job.after_job_id is not None:
            self.stdout.write(f"next fires: none of its own; it runs {schedule_text(job)}")
            return
        if job.next_run_at is None:
            self.stdout.write("next fires: none (the schedule has no fire left)")
            return
        fires = services.schedule_preview(
            job.schedule, count=SHOW_FIRES, after=job.next_run_at - timedelta(microseconds=1)
        )
        self.stdout.write("next fires:")
        self.stdout.write(preview_table(fires, job.timezone))

    # --- edit / delete --------------------------------------------------------------

    def do_edit(self, *, job: str, yes: bool, **options) -> None:
        check_schedule_options("jobs edit", options, required=False)
        check_one_of("jobs edit", options, TARGET_OPTIONS, required=False)
        job = find_job(job)
        changes = job_fields(options, job)
        if not changes:
            raise services.InvalidInput("job", "nothing to change: give the options to change (see jobs edit -h)")
        if Job.objects.filter(tenant_id=job.tenant_id, name=changes.get("name")).exclude(id=job.id).exists():
            raise services.InvalidInput(
                "name", f"tenant {job.tenant.slug!r} already has a job named {changes['name']!r}"
            )
        impact = services.job_update_impact(job, changes, count=SHOW_FIRES)
        if not impact["changes"]:
            self.stdout.write(f"Job {job_label(job)} already has these values; nothing to save.")
            return
        if app_settings.MANAGED_JOBS_READ_ONLY and job.managed_by:
            services.check_managed(job, actor="cli")  # refused before the preview and the question
        self.show_impact(job, impact)
        self.confirm("edit", "Save these changes?", yes=yes, refused="not saved")
        if Job.objects.filter(id=job.id).values_list("version", flat=True).first() != job.version:
            raise CommandError(
                f"jobs edit: job {job_label(job)} was changed by someone else meanwhile; "
                "nothing saved, run the edit again to see the new preview",
                returncode=1,
            )
        job = services.job_update(job, changes, actor="cli")
        self.stdout.write(
            f"Saved job {job_label(job)} (version {job.version}); next run at {utc_text(job.next_run_at)}."
        )
        if warning := services.drift_warning(job, "cli"):
            self.stderr.write(f"Warning: {warning}.")

    def show_impact(self, job: Job, impact: dict) -> None:
        self.stdout.write(f"Edit job {job_label(job)}:")
        width = max(len(key) for key in impact["changes"])
        for key, (before, after) in impact["changes"].items():
            self.stdout.write(f"  {key.ljust(width)}  {change_text(before)}  ->  {change_text(after)}")
        new_zone = impact["changes"].get("timezone", (None, job.timezone))[1]
        for title, fires, zone_name in (
            ("now", impact["next_before"], job.timezone),
            ("after the edit", impact["next_after"], new_zone),
        ):
            self.stdout.write("")
            self.stdout.write(f"next {SHOW_FIRES} fires {title}:")
            self.stdout.write(fires_table(fires, zone_name) if fires else "(no fires left)")
        self.stdout.write("")
        if impact["fires_now"]:
            listed = ", ".join(utc_text(at) for at in impact["fires_now"])
            self.stdout.write(f"due at once when saved: {listed}")
        for dropped in impact["skipped"]:
            self.stdout.write(f"dropped: {utc_text(dropped['at'])} ({dropped['reason']})")
        if impact["paused"]:
            self.stdout.write("(the job is paused: these fire only if it is resumed before them)")

    def do_delete(self, *, job: str, yes: bool, **options) -> None:
        job = find_job(job)
        runs = JobRun.objects.filter(job=job)
        total, active = runs.count(), runs.filter(state__in=ACTIVE_STATES).count()
        self.stdout.write(
            f"Job {job_label(job)}: {schedule_text(job)}, {target_text(job)}, {'enabled' if job.enabled else 'paused'}"
        )
        if total:
            self.stdout.write(
                f"Deleting it deletes its {plural(total, 'run')} from the ledger too"
                + (
                    f" ({active} pending, queued, running or retrying: their outcome will not be recorded)."
                    if active
                    else "."
                )
            )
        else:
            self.stdout.write("It has no runs.")
        self.confirm("delete", "Delete it?", yes=yes, refused="not deleted")
        label = job_label(job)
        services.job_delete(job, actor="cli")
        self.stdout.write(f"Deleted job {label} and its {plural(total, 'run')}.")

    def confirm(self, action: str, question: str, *, yes: bool, refused: str) -> None:
        """Return when the person at the terminal answers yes (or --yes was given); else end
        the command. Never waits on a stdin that is not a terminal: it refuses instead."""
        if yes:
            return
        stdin = getattr(self, "stdin", None) or sys.stdin
        if stdin is None or stdin.closed or not stdin.isatty():
            raise CommandError(
                f"jobs {action}: {refused}: no terminal to ask for confirmation; pass --yes to go ahead without asking",
                returncode=2,
            )
        self.stdout.write(f"{question} [y/N] ", ending="")
        self.stdout.flush()
        if stdin.readline().strip().lower() not in ("y", "yes"):
            raise CommandError(f"jobs {action}: {refused}", returncode=1)

    # --- list / show / runs ---------------------------------------------------------

    def do_list(self, *, tenant: str, limit: int, after_id: int, **options) -> None:
        check_range("limit", limit, 1, MAX_LIMIT)
        check_range("after_id", after_id, 0, 2**63 - 1)
        jobs = (
            Job.objects.select_related("tenant", "after_job")
            .only(*LIST_FIELDS)
            .annotate(last_run_state=last_run_state())
            .order_by("id")
        )
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
            (
                job.id,
                job.tenant.slug,
                job.name,
                schedule_text(job),
                status_text(job),
                job.next_run_at,
                job.last_run_state,
            )
            for job in page
        ]
        self.stdout.write(format_table(["id", "tenant", "name", "schedule", "status", "next_run_at", "last run"], rows))
        if more:
            self.stdout.write(f"(more jobs: --after-id {page[-1].id})")

    def do_show(self, *, job: str, **options) -> None:
        job = find_job(job)
        pairs: list[tuple[str, object]] = []
        for field in Job._meta.concrete_fields:
            if field.name == "flex_note":  # shown as the placement line below
                continue
            value = getattr(job, field.name)
            if field.name == "tenant":
                value = job.tenant.slug
            elif isinstance(field, JSONField):
                value = json.dumps(value, ensure_ascii=False)
            elif isinstance(value, bool):
                value = "yes" if value else "no"
            pairs.append((field.name, value))
            if field.name == "name":
                pairs += [("schedule", schedule_text(job)), ("status", status_text(job))]
        width = max(len(key) for key, _ in pairs)
        for key, value in pairs:
            self.stdout.write(f"{key.ljust(width)}  {cell(value)}")

        if job.flex_window:
            self.stdout.write(f"{'placement'.ljust(width)}  {job.flex_note}")
        schedule = job.schedule
        fires = services.job_preview(schedule, count=SHOW_FIRES)
        self.stdout.write("")
        note = "" if job.enabled else " (paused: these fire only if the job is resumed before them)"
        self.stdout.write(f"next {SHOW_FIRES} fires{note}:")
        self.stdout.write(
            fires_table(fires, job.timezone, notes=[schedules.calendar_note(schedule, at) for at in fires])
            if fires
            else no_fires_text(job)
        )

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
        until = pause_end(options.get("until"), options.get("for_"), db_now())
        by = cli_actor(options["by"]) if options.get("by") else "cli"
        job = services.job_pause(job, note=note, actor=by, until=until, on_expiry=options.get("on_expiry") or "")
        end = f" until {utc_text(job.paused_until)}, then {job.pause_expiry}" if job.paused_until else ""
        if was_enabled:
            self.stdout.write(f"Paused job {job_label(job)}{end}.")
        elif until is not None:
            self.stdout.write(f"Job {job_label(job)} was already paused: it now stays paused{end}.")
        else:
            self.stdout.write(f"Job {job_label(job)} was already paused.")

    def do_paused(self, *, tenant: str, **options) -> None:
        jobs = Job.objects.select_related("tenant")
        if tenant:
            jobs = jobs.filter(tenant=services.tenant_by_slug(tenant, field="tenant"))
        found = list(services.paused_jobs(jobs)[:MAX_LIMIT])
        self.stdout.write(paused_table(found, db_now()) if found else "No job is paused.")

    def do_resume(self, *, job: str, **options) -> None:
        job = find_job(job)
        was_enabled, was_auto = job.enabled, job.auto_paused_at is not None
        job = services.job_resume(job, actor="cli")
        if was_enabled:
            self.stdout.write(f"Job {job_label(job)} was not paused; next run at {utc_text(job.next_run_at)}.")
        else:
            cleared = " (it had paused itself after repeated failure; its count starts again)" if was_auto else ""
            self.stdout.write(f"Resumed job {job_label(job)}{cleared}; next run at {utc_text(job.next_run_at)}.")

    def do_trigger(self, *, job: str, **options) -> None:
        job = find_job(job)
        run, publish_error = services.job_trigger_reporting(job, actor="cli")
        self.stdout.write(
            f"Triggered job {job_label(job)}: run {run.id} ({run.state}, {run.trigger}) "
            f"at {utc_text(run.scheduled_at)}."
        )
        if publish_error is not None:
            raise CommandError(
                f"jobs trigger: publish: run {run.id} is recorded but was not sent to the broker "
                f"({shorten(str(publish_error), 200)})",
                returncode=1,
            )

    # --- preview --------------------------------------------------------------------

    def do_preview(
        self,
        *,
        job: str | None,
        cron: str | None,
        every: int | None,
        timezone: str,
        count: int,
        start: str | None,
        end: str | None,
        **options,
    ) -> None:
        check_range("count", count, 1, MAX_PREVIEW)
        if sum(value is not None for value in (job, cron, every)) != 1:
            raise services.InvalidInput("schedule", "give JOB, or --cron EXPR, or --every SECONDS")
        start_at, end_at = parse_instant("start_at", start), parse_instant("end_at", end)
        if job is not None:
            if timezone:
                raise services.InvalidInput("timezone", "applies to --cron only; a saved job uses its own zone")
            if end_at is not None:
                raise services.InvalidInput("end_at", "applies to --cron or --every; a saved job keeps its own end")
            found = find_job(job)
            title, schedule = f"job {job_label(found)}: {schedule_text(found)}", found.schedule
            after = start_at - timedelta(microseconds=1) if start_at is not None else None
        else:
            # The same path as the API's POST /preview/: the schedule starts at start_at.
            spec = services.JobSpec(
                name="", cron=cron or "", timezone=timezone or "UTC", every=every, start_at=start_at, end_at=end_at
            )
            schedule = services.spec_schedule(Tenant(slug="", timezone="UTC"), spec)
            title, after = schedule.describe(), None
        fires = services.schedule_preview(schedule, count=count, after=after)
        since = f", from {utc_text(start_at)}" if start_at is not None else ""
        self.stdout.write(f"next {count} fires of {title}{since}:")
        if job is not None and found.flex_window:
            self.stdout.write(f"placement: {found.flex_note}")
        if not fires:
            self.stdout.write(no_fires_text(found) if job is not None else "(no fires left)")
            return
        self.stdout.write(preview_table(fires, schedule.timezone))

    # --- rebalance ------------------------------------------------------------------

    def do_rebalance(self, *, tenant: str, queue: str | None, dry_run: bool, **options) -> None:
        found = services.tenant_by_slug(tenant) if tenant else None
        moves = services.jobs_rebalance(tenant=found, queue=queue, dry_run=dry_run, actor="cli")
        if not moves:
            self.stdout.write("(no flexible-window jobs)")
            return
        rows = [
            (
                move.job.id,
                move.job.tenant.slug,
                move.job.name,
                f"{move.job.flex_window} ({move.job.timezone})",
                cron_time(move.before),
                "->",
                cron_time(move.after),
                "moved" if move.moved else "stays",
            )
            for move in moves
        ]
        self.stdout.write(format_table(["id", "tenant", "name", "window", "old", "", "new", ""], rows))
        moved = sum(move.moved for move in moves)
        verb = "would move" if dry_run else "moved"
        self.stdout.write(
            f"{plural(len(moves), 'flexible job')}: {moved} {verb}" + (" (dry run: nothing saved)" if dry_run else ".")
        )
