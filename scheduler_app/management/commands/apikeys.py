"""API keys: `manage.py apikeys add --tenant SLUG`, `list`, `revoke PREFIX`.

A key is printed once, when it is made; only its hash is kept.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app import services
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import ApiKey

MAX_LIMIT = 10000


class Command(OneLineErrors, BaseCommand):
    help = "Manage REST API keys. Subcommands: add, list, revoke."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{add,list,revoke}")

        add = sub.add_parser("add", help="Make a key (printed once)")
        owner = add.add_mutually_exclusive_group(required=True)
        owner.add_argument("--tenant", metavar="SLUG", help="The tenant the key acts for")
        owner.add_argument("--staff", action="store_true", help="A staff key: administers every tenant")
        add.add_argument("--name", default="", help="What the key is for (default: cli)")

        lst = sub.add_parser("list", help="List keys, newest first")
        lst.add_argument("--tenant", metavar="SLUG", default="", help="Only this tenant's keys")
        lst.add_argument("--limit", type=int, default=200, help=f"At most this many (1-{MAX_LIMIT}, default 200)")

        revoke = sub.add_parser("revoke", help="Revoke a key: it stops working at once")
        revoke.add_argument("prefix", help="The key's prefix (the part after cf_, shown by list)")

    def handle(self, *args, action: str, **options) -> None:
        self.run_action("apikeys", action, **options)

    def do_add(self, *, tenant: str | None, staff: bool, name: str, **options) -> None:
        owner = None
        if not staff:
            assert tenant is not None  # --tenant or --staff: a required group
            owner = services.tenant_by_slug(tenant)
        key, raw = services.apikey_create(tenant=owner, name=name or "cli", actor="cli")
        self.stdout.write(f"Created {'staff' if owner is None else owner.slug} API key {key.prefix} ({key.name}).")
        self.stdout.write("The key (shown once; send it as 'Authorization: Bearer <key>'):")
        self.stdout.write(raw)

    def do_list(self, *, tenant: str, limit: int, **options) -> None:
        if not 1 <= limit <= MAX_LIMIT:
            raise services.InvalidInput("limit", f"must be between 1 and {MAX_LIMIT}")
        keys = ApiKey.objects.select_related("tenant").order_by("-created_at", "-id")
        if tenant:
            keys = keys.filter(tenant=services.tenant_by_slug(tenant))
        rows = [
            (
                key.prefix,
                key.tenant.slug if key.tenant else "(staff)",
                key.name,
                key.created_at,
                key.last_used_at,
                key.revoked_at,
            )
            for key in keys[:limit]
        ]
        if not rows:
            self.stdout.write("(no keys)")
            return
        self.stdout.write(format_table(["prefix", "tenant", "name", "created", "last used", "revoked"], rows))

    def do_revoke(self, *, prefix: str, **options) -> None:
        key = ApiKey.objects.filter(prefix=prefix).first()
        if key is None:
            raise services.InvalidInput("prefix", f"no key with prefix {prefix!r}")
        key = services.apikey_revoke(key, actor="cli")
        self.stdout.write(f"Revoked key {key.prefix} ({key.name}) at {key.revoked_at.isoformat()}")
