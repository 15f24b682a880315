"""`manage.py import_beat --tenant SLUG`: django-celery-beat's schedules become Cronfleet jobs.

The work is scheduler_app.services.importbeat's; this command parses the options and prints the report.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from scheduler_app import hints, services
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import NodeKind, db_now
from scheduler_app.observability.nodes import node_states, queue_consumers
from scheduler_app.queues import queue_name
from scheduler_app.services import beatfile, importbeat
from scheduler_app.targets import task as task_target


class Command(OneLineErrors, BaseCommand):
    help = (
        "Import django-celery-beat's PeriodicTask rows and the beat schedule's entries (CELERY_BEAT_SCHEDULE, "
        "CELERYBEAT_SCHEDULE, the Celery app's conf.beat_schedule) as jobs of a tenant, "
        "each named as its source. Running it again changes nothing; an existing job that differs is never "
        "overwritten."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, metavar="SLUG", help="The tenant the jobs are made for")
        parser.add_argument(
            "--from-db",
            action="store_true",
            help="Import the PeriodicTask rows of this database (without either --from option: both)",
        )
        parser.add_argument(
            "--from-settings",
            action="store_true",
            help="Import the entries of CELERY_BEAT_SCHEDULE, CELERYBEAT_SCHEDULE "
            "and the Celery app's conf.beat_schedule",
        )
        parser.add_argument("--dry-run", action="store_true", help="Say what would happen; write nothing")
        parser.add_argument(
            "--disable-source",
            action="store_true",
            help="Disable the PeriodicTask rows of the jobs imported (or already imported), in "
            "the same transaction, so the two schedulers never both send them",
        )
        parser.add_argument(
            "--to-file",
            metavar="PATH",
            help="Write the schedules as a declaration file (schedules as code: apply it with "
            "`schedules apply --file PATH`) instead of jobs; nothing is written to the database",
        )
        parser.add_argument(
            "--owner",
            default="celery-beat",
            help="With --to-file: the owner the declaration names (default: celery-beat)",
        )

    def handle(
        self, *args, tenant: str, from_db: bool, from_settings: bool, dry_run: bool, disable_source: bool, **options
    ) -> None:
        if not from_db and not from_settings:
            from_db = from_settings = True
        if options.get("to_file"):
            self.write_file(tenant, options["to_file"], options["owner"], from_db=from_db, from_settings=from_settings)
            return
        try:
            report = importbeat.import_schedules(
                services.tenant_by_slug(tenant),
                from_db=from_db,
                from_settings=from_settings,
                dry_run=dry_run,
                disable_source=disable_source,
            )
        except services.InvalidInput as exc:
            raise CommandError(f"import_beat: {exc.field}: {exc.message}", returncode=2) from None
        except DatabaseError as exc:
            if "django_celery_beat" not in str(exc):
                raise
            raise CommandError(
                "import_beat: the django-celery-beat tables are not in this database (run "
                "./manage.py migrate django_celery_beat, or point DATABASES['default'] in your Django "
                "settings at the database that holds them: DATABASE_URL in Cronfleet's own "
                "deployment)",
                returncode=2,
            ) from None
        sources = " and ".join(
            name for name, wanted in (("PeriodicTask rows", from_db), ("the beat schedule", from_settings)) if wanted
        )
        self.stdout.write(
            f"Import into tenant {tenant} from {sources}" + (" (dry run: nothing written):" if dry_run else ":")
        )
        self.print_report(report)
        self.warn_unconsumed(tenant, report)

    def write_file(self, tenant: str, path: str, owner: str, *, from_db: bool, from_settings: bool) -> None:
        """The schedules as a declaration file (services.declared) instead of jobs."""
        try:
            services.check_name("owner", owner, max_length=90)
            text, report = beatfile.declaration_file(
                services.tenant_by_slug(tenant), owner, from_db=from_db, from_settings=from_settings
            )
        except services.InvalidInput as exc:
            raise CommandError(f"import_beat: {exc.field}: {exc.message}", returncode=2) from None
        try:
            with open(path, "x", encoding="utf-8") as out:
                out.write(text)
        except FileExistsError:
            raise CommandError(
                f"import_beat: {path} exists already; nothing written (remove it, or name another file)", returncode=2
            ) from None
        declared = report.count("declared")
        self.stdout.write(
            f"Wrote {path}: {declared} job{'s' if declared != 1 else ''} of tenant {tenant}, owner "
            f"{owner}; {report.count('skipped')} skipped. Next: ./manage.py schedules plan --file {path}"
        )
        if report.outcomes:
            rows = [
                (outcome.origin, outcome.name, outcome.result, outcome.schedule, "; ".join(outcome.notes))
                for outcome in report.outcomes
            ]
            self.stdout.write(format_table(["source", "name", "result", "job schedule", "notes"], rows))

    def print_report(self, report: importbeat.Report) -> None:
        if not report.outcomes:
            self.stdout.write(f"(nothing to import: read {', '.join(report.read)}; all empty)")
            return
        rows = [
            (outcome.origin, outcome.name, outcome.result, outcome.schedule, "; ".join(outcome.notes))
            for outcome in report.outcomes
        ]
        self.stdout.write(format_table(["source", "name", "result", "job schedule", "notes"], rows))
        imported = "would import" if report.dry_run else "imported"
        counts = ", ".join(f"{report.count(result)} {result}" for result in (imported, "unchanged", "skipped"))
        self.stdout.write("")
        self.stdout.write(f"{counts}.")
        if report.disabled:
            verb = "would be disabled" if report.dry_run else "disabled"
            self.stdout.write(f"PeriodicTask rows {verb}: {', '.join(report.disabled)}.")
        if report.still_enabled:
            self.stdout.write(
                f"Still enabled in django-celery-beat, so a running celery beat sends them too: "
                f"{', '.join(report.still_enabled)}. Disable them with --disable-source (or stop "
                "celery beat) before the beats fire them."
            )
        if allow := report.allow_line():
            missing = report.missing_tasks()
            pattern = task_target.suggested_pattern(missing[0])
            self.stdout.write(
                f"Tasks not allowed ({', '.join(missing)}): to import their jobs, allow them in "
                f"{hints.setting_hint(task_target.SETTING)}"
                + (f", by name or by a pattern such as {pattern!r}" if pattern else "")
                + f"; the workers of your Celery app (celery -A {hints.celery_app_argument()}) must "
                "import the tasks. Then run again. In your settings:"
            )
            self.stdout.write(f"  {report.allow_setting()}")
            self.stdout.write("In Cronfleet's own deployment, its environment:")
            self.stdout.write(f"  {allow}")
        self.print_queues(report)
        if report.differences:
            self.stdout.write("")
            self.stdout.write("Differences in meaning from django-celery-beat:")
            for difference in report.differences:
                self.stdout.write(f"- {difference}")

    def print_queues(self, report: importbeat.Report) -> None:
        """The queues of the jobs (imported, unchanged, or that would be), each with its live
        workers, as their node heartbeats say (observability.nodes.queue_consumers)."""
        queues = report.queues()
        if not queues:
            return
        consumers = queue_consumers(node_states(db_now(), kind=NodeKind.WORKER))
        parts = []
        for queue, jobs in queues.items():
            name, workers = queue_name(queue), consumers.get(queue_name(queue), 0)
            live = f"{workers} live worker{'s' if workers != 1 else ''}" if workers else "NO live worker"
            parts.append(f"{name} ({jobs} job{'s' if jobs != 1 else ''}, {live})")
        self.stdout.write(f"Queues: {'; '.join(parts)}.")
        unconsumed = [queue_name(queue) for queue in queues if not consumers.get(queue_name(queue))]
        if unconsumed:
            self.stdout.write(
                f"No live worker consumes {', '.join(unconsumed)}: their runs would wait there "
                "(see the warning on stderr)."
            )

    def warn_unconsumed(self, tenant: str, report: importbeat.Report) -> None:
        """A warning on stderr for each queue of the jobs imported (or already there, or that
        a dry run would import) that no live worker consumes: their runs would wait, and
        expire, there."""
        now = db_now()
        for queue in report.queues():
            if warning := hints.unconsumed_warning(queue, now):
                self.stderr.write(f"import_beat: {warning}")
