"""Fleet objectives: `manage.py objectives add --tenant SLUG --name N --kind start --within 60
--target 99% [--tag T] [--window-days 28]` (`--fleet` instead of `--tenant` for every tenant's
jobs), `list [--tenant SLUG]`, `remove OBJECTIVE`. An objective is named TENANT/NAME, or NAME
alone for the fleet's (docs/objectives.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app import services
from scheduler_app.ledger.objectives import window_of
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import Objective, db_now
from scheduler_app.services.objectives import describe, objective_create, objective_delete, objective_get

OBJECTIVE_HELP = "The objective, as TENANT/NAME (NAME alone: a fleet-wide objective)"


def find_objective(label: str) -> Objective:
    tenant, sep, name = label.partition("/")
    if not sep:
        return objective_get(None, label)
    return objective_get(services.tenant_by_slug(tenant), name)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.3f}%"


class Command(OneLineErrors, BaseCommand):
    help = "Manage fleet objectives. Subcommands: add, list, remove."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="{add,list,remove}")
        add = sub.add_parser("add", help="Declare an objective")
        owner = add.add_mutually_exclusive_group(required=True)
        owner.add_argument("--tenant", metavar="SLUG")
        owner.add_argument("--fleet", action="store_true", help="An objective over every tenant's jobs")
        add.add_argument("--name", required=True)
        add.add_argument("--kind", required=True, choices=("start", "success"))
        add.add_argument(
            "--within", dest="threshold_seconds", type=int, metavar="SECONDS", help="start: a good fire starts within"
        )
        add.add_argument("--target", required=True, help="The promise, e.g. 99%% or 0.99")
        add.add_argument("--tag", default="", help="Only the jobs with this tag")
        add.add_argument("--window-days", type=int, default=28, metavar="DAYS")
        lst = sub.add_parser("list", help="List objectives with their attainment and error budget left")
        lst.add_argument("--tenant", metavar="SLUG", default="", help="Only this tenant's (and the fleet's)")
        sub.add_parser("remove", help="Remove an objective").add_argument(
            "objective", metavar="OBJECTIVE", help=OBJECTIVE_HELP
        )

    def handle(self, *args, subcommand: str, **options) -> None:
        self.run_action("objectives", subcommand, **options)

    def do_add(self, *, tenant: str | None, fleet: bool, name: str, **options) -> None:
        owner = None if fleet else services.tenant_by_slug(tenant or "")
        fields = {key: options[key] for key in ("kind", "threshold_seconds", "target", "tag", "window_days")}
        objective = objective_create(owner, name=name, actor="cli", **fields)
        self.stdout.write(f"Declared objective {objective}: {describe(objective)}")

    def do_list(self, *, tenant: str, **options) -> None:
        objectives = Objective.objects.select_related("tenant").order_by("tenant__slug", "name")
        if tenant:
            owner = services.tenant_by_slug(tenant)
            objectives = objectives.filter(tenant=owner) | objectives.filter(tenant__isnull=True)
        found = list(objectives)
        if not found:
            self.stdout.write("(no objectives)")
            return
        windows = window_of(found, db_now())
        rows = []
        for objective in found:
            window = windows[objective.id]
            rows.append(
                (
                    str(objective),
                    describe(objective),
                    f"{window.good}/{window.total}",
                    percent(window.attainment),
                    percent(window.budget_left),
                )
            )
        self.stdout.write(format_table(["objective", "promise", "good/total", "attained", "budget left"], rows))

    def do_remove(self, *, objective: str, **options) -> None:
        objective_delete(find_objective(objective), actor="cli")
        self.stdout.write(f"Removed objective {objective}")
