"""Create and list tenants: `manage.py tenants add SLUG ...`, `manage.py tenants list`."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce

from scheduler_app import services
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import Job, Tenant

MAX_LIMIT = 10000


class Command(OneLineErrors, BaseCommand):
    help = "Manage tenants. Subcommands: add, list, rotate-secret."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{add,list,rotate-secret}")

        add = sub.add_parser("add", help="Create a tenant")
        add.add_argument("slug", help="1-64 lowercase letters, digits, hyphens or underscores")
        add.add_argument("--name", default="", help="Display name (default: the slug)")
        add.add_argument("--timezone", default="UTC",
                         help="IANA zone that new cron jobs use unless they name their own (default UTC)")

        lst = sub.add_parser("list", help="List tenants with their job counts, by slug")
        lst.add_argument("--limit", type=int, default=200, help=f"At most this many (1-{MAX_LIMIT}, default 200)")
        lst.add_argument("--after", metavar="SLUG", default="", help="Start after this slug (next page)")

        rotate = sub.add_parser("rotate-secret", help="Give a tenant a new webhook signing secret (shown once)")
        rotate.add_argument("slug")
        rotate.add_argument("--overlap", type=int, default=86400, metavar="SECONDS",
                            help="How long the previous secret keeps signing beside the new one (default 86400)")

    def handle(self, *args, action: str, **options) -> None:
        try:
            getattr(self, f"do_{action.replace('-', '_')}")(**options)
        except services.InvalidInput as exc:
            raise CommandError(f"tenants {action}: {exc.field}: {exc.message}", returncode=2) from None

    def do_add(self, *, slug: str, name: str, timezone: str, **options) -> None:
        tenant = services.tenant_create(slug=slug, name=name, timezone=timezone, actor="cli")
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.name}, {tenant.timezone}), id {tenant.id}")

    def do_rotate_secret(self, *, slug: str, overlap: int, **options) -> None:
        if not 0 <= overlap <= 30 * 86400:
            raise services.InvalidInput("overlap", "must be between 0 and 2592000 seconds")
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise services.InvalidInput("slug", f"no tenant {slug!r}")
        secret = services.tenant_rotate_webhook_secret(tenant, overlap=timedelta(seconds=overlap), actor="cli")
        self.stdout.write(f"New webhook signing secret for {slug} (shown once; store it with your receiver):")
        self.stdout.write(secret)
        if overlap:
            self.stdout.write(f"The previous secret keeps signing for {overlap} s.")

    def do_list(self, *, limit: int, after: str, **options) -> None:
        if not 1 <= limit <= MAX_LIMIT:
            raise services.InvalidInput("limit", f"must be between 1 and {MAX_LIMIT}")
        # A correlated count per listed tenant: only the page's tenants are counted.
        job_count = (Job.objects.filter(tenant=OuterRef("pk")).order_by().values("tenant")
                     .annotate(n=Count("id")).values("n"))
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
