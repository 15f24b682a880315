"""Create, list and change tenants, and move one between cells: `manage.py tenants add SLUG`,
`list`, `set`, `rotate-secret`, `export SLUG --cut WHEN --file F`, `import F`."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from scheduler_app import services
from scheduler_app.conf import app_settings
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import ApiKey, Job, Monitor, Tenant, db_now
from scheduler_app.services import documentfile, tenantmove
from scheduler_app.services.privatefile import write_private
from scheduler_app.validation import InvalidInput

MAX_LIMIT = 10000


UNSET = object()
QUOTA_OPTIONS = {  # option name: Tenant field
    "max-jobs": "max_jobs",
    "min-interval": "min_interval_seconds",
    "max-fires-per-minute": "max_fires_per_minute",
    "max-concurrent-runs": "max_concurrent_runs",
    "weight": "weight",
    "api-requests-per-minute": "api_requests_per_minute",
    "manual-runs-per-hour": "manual_runs_per_hour",
}
# What 'none' means for the fields whose NULL is a setting's default rather than no limit.
NONE_IS_DEFAULT = {
    "api_requests_per_minute": "CRONFLEET_API_REQUESTS_PER_MINUTE",
    "manual_runs_per_hour": "CRONFLEET_MANUAL_RUNS_PER_HOUR; 0: unbounded",
}


def _limit(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'none'") from None


def _shown(value) -> str:
    return "none" if value is None else str(value)


class Command(OneLineErrors, BaseCommand):
    help = "Manage tenants. Subcommands: add, list, set, rotate-secret, export, import."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{add,list,set,rotate-secret,export,import}")

        add = sub.add_parser("add", help="Create a tenant")
        add.add_argument("slug", help="1-64 lowercase letters, digits, hyphens or underscores")
        add.add_argument("--name", default="", help="Display name (default: the slug)")
        add.add_argument(
            "--timezone",
            default="UTC",
            help="IANA zone that new cron jobs use unless they name their own (default UTC)",
        )

        lst = sub.add_parser("list", help="List tenants with their job counts, by slug")
        lst.add_argument("--limit", type=int, default=200, help=f"At most this many (1-{MAX_LIMIT}, default 200)")
        lst.add_argument("--after", metavar="SLUG", default="", help="Start after this slug (next page)")

        change = sub.add_parser("set", help="Change a tenant's quotas, fair-share weight or active flag")
        change.add_argument("slug")
        for option, field in QUOTA_OPTIONS.items():
            change.add_argument(
                f"--{option}",
                dest=field,
                type=_limit,
                metavar="N|none",
                default=UNSET,
                help=f"{field} ('none': {NONE_IS_DEFAULT.get(field, 'no limit')})",
            )
        change.add_argument("--active", choices=["yes", "no"], help="Whether the tenant's keys and new jobs work")

        rotate = sub.add_parser("rotate-secret", help="Give a tenant a new webhook signing secret (shown once)")
        rotate.add_argument("slug")
        rotate.add_argument(
            "--overlap",
            type=int,
            default=86400,
            metavar="SECONDS",
            help="How long the previous secret keeps signing beside the new one (default 86400)",
        )

        export = sub.add_parser(
            "export",
            help="Write a tenant's document for another cell and stop its fires here from the cut on (docs/scaling.md)",
        )
        export.add_argument("slug")
        export.add_argument(
            "--cut",
            required=True,
            metavar="WHEN",
            help="The fire time from which the tenant's jobs fire in the new cell: an instant "
            "with its offset (2030-01-01T09:00:00Z) or +SECONDS from this cell's now",
        )
        export.add_argument(
            "--file", required=True, help="Where to write the document (owner-only: it holds the tenant's secrets)"
        )
        export.add_argument(
            "--with-runs",
            action="store_true",
            help="Carry the finished runs before the cut too (default: the history stays here)",
        )

        load = sub.add_parser("import", help="Create an exported tenant in this cell, its jobs firing from the cut")
        load.add_argument("file")
        load.add_argument(
            "--late",
            action="store_true",
            help="Import even though the cut has passed here: the fires since are handled by each job's misfire policy",
        )

    def handle(self, *args, action: str, **options) -> None:
        self.run_action("tenants", action, **options)

    def do_add(self, *, slug: str, name: str, timezone: str, **options) -> None:
        tenant = services.tenant_create(slug=slug, name=name, timezone=timezone, actor="cli")
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.name}, {tenant.timezone}), id {tenant.id}")

    def do_set(self, *, slug: str, active: str | None, **options) -> None:
        changes = {field: options[field] for field in QUOTA_OPTIONS.values() if options[field] is not UNSET}
        if active is not None:
            changes["is_active"] = active == "yes"
        tenant = services.tenant_update(services.tenant_by_slug(slug, field="slug"), changes, actor="cli")
        self.stdout.write(
            format_table(
                ["slug", "active", *QUOTA_OPTIONS],
                [
                    (
                        tenant.slug,
                        "yes" if tenant.is_active else "no",
                        *[_shown(getattr(tenant, field)) for field in QUOTA_OPTIONS.values()],
                    )
                ],
            )
        )

    def do_rotate_secret(self, *, slug: str, overlap: int, **options) -> None:
        if not 0 <= overlap <= 30 * 86400:
            raise services.InvalidInput("overlap", "must be between 0 and 2592000 seconds")
        tenant = services.tenant_by_slug(slug, field="slug")
        secret = services.tenant_rotate_webhook_secret(tenant, overlap=timedelta(seconds=overlap), actor="cli")
        self.stdout.write(f"New webhook signing secret for {slug} (shown once; store it with your receiver):")
        self.stdout.write(secret)
        if overlap:
            self.stdout.write(f"The previous secret keeps signing for {overlap} s.")

    def do_export(self, *, slug: str, cut: str, file: str, with_runs: bool, **options) -> None:
        tenant = services.tenant_by_slug(slug, field="slug")
        instant = cut_instant(cut)
        document = services.tenant_export(
            tenant,
            instant,
            write=lambda doc: write_private(Path(file), lambda out: tenantmove.dump(doc, out)),
            with_runs=with_runs,
            actor="cli",
        )
        self.stdout.write(
            f"Exported tenant {slug} to {file}: {len(document['jobs'])} jobs, "
            f"{len(document['api_keys'])} API keys, {document['runs'].written} runs."
        )
        self.stdout.write(
            f"Its fires from {instant.isoformat()} on are the new cell's: import the file there "
            "before then (`manage.py tenants import FILE`)."
        )
        for warning in document["warnings"]:
            self.stderr.write(f"warning: {warning}")

    def do_import(self, *, file: str, late: bool, **options) -> None:
        document = documentfile.read_document(Path(file))
        tenant = services.tenant_import(document, late=late, actor="cli")
        jobs = Job.objects.filter(tenant=tenant)
        first = jobs.exclude(next_run_at=None).order_by("next_run_at").values_list("next_run_at", flat=True).first()
        self.stdout.write(
            f"Imported tenant {tenant.slug}: {jobs.count()} jobs from the cut {document['cut']}; "
            f"first fire here {first.isoformat() if first else '-'}."
        )
        named = sorted(
            {
                cell
                for cell in (
                    *ApiKey.objects.filter(tenant=tenant).values_list("cell", flat=True),
                    *Monitor.objects.filter(tenant=tenant).values_list("cell", flat=True),
                )
                if cell != app_settings.CELL
            }
        )
        if named:
            self.stdout.write(
                f"Its API keys and ping URLs name cell {', '.join(named)}: run `manage.py cells routes "
                "--out DIR` here and in the cell it left, then reload the routing proxy."
            )

    def do_list(self, *, limit: int, after: str, **options) -> None:
        if not 1 <= limit <= MAX_LIMIT:
            raise services.InvalidInput("limit", f"must be between 1 and {MAX_LIMIT}")
        # A correlated count per listed tenant: only the page's tenants are counted.
        job_count = (
            Job.objects.filter(tenant=OuterRef("pk")).order_by().values("tenant").annotate(n=Count("id")).values("n")
        )
        tenants = Tenant.objects.annotate(
            job_count=Coalesce(Subquery(job_count, output_field=IntegerField()), 0)
        ).order_by("slug")
        if after:
            tenants = tenants.filter(slug__gt=after)
        page = list(tenants[: limit + 1])
        more = len(page) > limit
        page = page[:limit]
        if not page:
            self.stdout.write("(no tenants)")
            return
        rows = [(t.slug, t.name, t.timezone, "yes" if t.is_active else "no", t.job_count) for t in page]
        self.stdout.write(format_table(["slug", "name", "zone", "active", "jobs"], rows))
        if more:
            self.stdout.write(f"(more tenants: --after {page[-1].slug})")


def cut_instant(text: str):
    """--cut: an instant with its offset, or +SECONDS from this cell's (the database's) now."""
    if text.startswith("+"):
        try:
            return db_now() + timedelta(seconds=float(text[1:]))
        except ValueError:
            raise InvalidInput("cut", f"{text!r}: give +SECONDS, e.g. +120") from None
    instant = parse_datetime(text.replace("Z", "+00:00")) if text else None
    if instant is None or instant.tzinfo is None:
        raise InvalidInput("cut", f"{text!r} is not an instant with its UTC offset (e.g. 2030-01-01T09:00:00Z)")
    return instant
