"""This cell in a fleet of cells (docs/scaling.md: Routing): `manage.py cells routes --out DIR`
writes the routing proxy's overrides for tenants moved here; `cells directory` lists the
tenants this cell holds."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.services import cells


class Command(OneLineErrors, BaseCommand):
    help = "This cell in a fleet of cells. Subcommands: routes, directory."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{routes,directory}")
        routes = sub.add_parser("routes", help="Write the proxy's override maps for tenants moved into this cell")
        routes.add_argument(
            "--out",
            required=True,
            metavar="DIR",
            help="The proxy's routes directory (deploy/nginx/cells.conf includes its *.map)",
        )
        sub.add_parser("directory", help="The tenants this cell holds: slug, cell, active")

    def handle(self, *args, action: str, **options) -> None:
        self.run_action("cells", action, **options)

    def do_routes(self, *, out: str, **options) -> None:
        routes = cells.write_routes(Path(out))
        keys, pings = routes.names
        self.stdout.write(
            f"Wrote {keys} ({len(routes.keys)} API keys) and {pings} ({len(routes.pings)} ping keys) "
            f"in {out}; reload the proxy (nginx -s reload)."
        )

    def do_directory(self, **options) -> None:
        rows = [(slug, cell, "yes" if active else "no") for slug, cell, active in cells.directory_rows()]
        self.stdout.write(format_table(["tenant", "cell", "active"], rows) if rows else "(no tenants)")
