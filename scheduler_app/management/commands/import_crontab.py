"""`manage.py import_crontab FILE --tenant SLUG`: a crontab file's lines become monitored jobs.

The work is scheduler_app.services.crontab's; this command reads the file and prints each job's
ping URL (the line to add to the crontab entry: `&& curl -fsS -m 10 --retry 3 <url>`).
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app import services
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.services import crontab


class Command(OneLineErrors, BaseCommand):
    help = (
        "Import a crontab file (five time fields or a macro such as @daily, then a command) as monitored "
        "jobs of a tenant, which the machines running them report to by pinging their check-in URLs. "
        "All lines or none: a bad line refuses the import, naming its number."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="The crontab file ('-': standard input)")
        parser.add_argument("--tenant", required=True, metavar="SLUG", help="The tenant the jobs are made for")
        parser.add_argument(
            "--grace",
            type=int,
            default=300,
            metavar="SECONDS",
            help="Each job's grace: how long after a fire a success may come (default 300)",
        )
        parser.add_argument("--tag", action="append", default=[], help="A tag for every job imported (repeatable)")

    def handle(self, *args, file: str, tenant: str, grace: int, tag: list[str], **options) -> None:
        try:
            text = sys.stdin.read() if file == "-" else open(file, encoding="utf-8").read()  # noqa: SIM115
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"import_crontab: file: cannot read {file}: {exc}", returncode=2) from None
        try:
            jobs, notes = crontab.import_crontab(
                services.tenant_by_slug(tenant), text, grace_seconds=grace, tags=tag, actor="cli"
            )
        except services.InvalidInput as exc:
            raise CommandError(
                f"import_crontab: {exc.field}: {exc.message}; nothing was imported", returncode=2
            ) from None
        for note in notes:
            self.stdout.write(f"note: {note}")
        rows = [(job.name, job.cron, job.description[:60], services.ping_url(job.monitor)) for job in jobs]
        self.stdout.write(format_table(["NAME", "SCHEDULE", "COMMAND", "PING URL"], rows))
        self.stdout.write(f"imported {len(jobs)} monitored jobs into {tenant}")
