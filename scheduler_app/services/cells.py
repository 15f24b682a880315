"""The routing proxy's view of this cell (docs/scaling.md: Routing).

API keys and ping URLs name the cell that made them (CRONFLEET_CELL), so the proxy in front of
the cells (deploy/nginx/cells.conf) sends a request to its cell with no lookup. A tenant moved
here keeps its keys and ping URLs, which name the cell it came from: this cell tells the proxy
so in two override maps, rewritten whole from the database, so running it again (or after a
second move) gives the same files:

    <cell>.keys.map    <key prefix> <cell>;    the API keys held here that name another cell
    <cell>.pings.map   <ping key> <cell>;      the same for check-in keys

Only active tenants' rows are listed: a tenant exported from here is inactive here, so the
cell it left drops its overrides when it writes its maps again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scheduler_app.conf import app_settings
from scheduler_app.models import ApiKey, Monitor, Tenant
from scheduler_app.services.privatefile import write_private
from scheduler_app.validation import InvalidInput


@dataclass(frozen=True)
class Routes:
    keys: list[str]  # key prefixes held here, named by another cell
    pings: list[str]  # ping keys held here, named by another cell

    @property
    def names(self) -> tuple[str, str]:
        return f"{this_cell()}.keys.map", f"{this_cell()}.pings.map"


def this_cell() -> str:
    if not app_settings.CELL:
        raise InvalidInput("CRONFLEET_CELL", "is not set: name this cell first (the name its API keys carry)")
    return app_settings.CELL


def route_overrides() -> Routes:
    """What the proxy must send here although the request names another cell (or none)."""
    cell = this_cell()
    keys = (
        ApiKey.objects.filter(tenant__is_active=True, revoked_at__isnull=True)
        .exclude(cell=cell)
        .order_by("prefix")
        .values_list("prefix", flat=True)
    )
    pings = (
        Monitor.objects.filter(tenant__is_active=True)
        .exclude(cell=cell)
        .order_by("ping_key")
        .values_list("ping_key", flat=True)
    )
    return Routes(list(keys), [str(key) for key in pings])


def write_routes(directory: Path) -> Routes:
    """Write this cell's two override maps into `directory`, each replaced in one rename and
    readable by its owner only: the ping keys in them are credentials (nginx's master, root,
    reads them at reload)."""
    if not directory.is_dir():
        raise InvalidInput("out", f"{directory} is not a directory")
    routes, cell = route_overrides(), this_cell()
    for name, entries in zip(routes.names, (routes.keys, routes.pings), strict=True):
        text = "".join(f"{entry} {cell};\n" for entry in entries)
        header = f"# written by `manage.py cells routes` in cell {cell}: {len(entries)} entries\n"
        write_private(directory / name, header + text)
    return routes


def directory_rows() -> list[tuple[str, str, bool]]:
    """This cell's part of the fleet's directory: (tenant slug, this cell, active)."""
    cell = this_cell()
    return [(slug, cell, active) for slug, active in Tenant.objects.order_by("slug").values_list("slug", "is_active")]
