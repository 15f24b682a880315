"""Maintenance windows: `manage.py windows add --tenant SLUG --name N --starts-at T --ends-at T`
(or `--cron EXPR --duration MINUTES --zone ZONE` for a recurring one; `--deployment` instead
of `--tenant` for the whole deployment's) `[--action skip|defer --running cancel --tag T
--kind http]`, `list`, `show`, `update`, `enable`, `disable`, `delete`. A window is named
TENANT/NAME, or NAME alone for the deployment's (docs/maintenance-windows.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app import services
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import MaintenanceWindow, db_now
from scheduler_app.services.windows import (
    local_words,
    state_of,
    when_text,
    window_create,
    window_delete,
    window_get,
    window_update,
)

WINDOW_HELP = "The window, as TENANT/NAME (NAME alone: a deployment-wide window)"


def find_window(label: str) -> MaintenanceWindow:
    tenant, sep, name = label.partition("/")
    if not sep:
        return window_get(None, label)
    return window_get(services.tenant_by_slug(tenant), name)


def label_of(window: MaintenanceWindow) -> str:
    return f"{window.tenant.slug}/{window.name}" if window.tenant_id is not None else window.name


def span_text(window: MaintenanceWindow) -> str:
    """The window's times: its recurrence, or its one-off span in its zone."""
    times = window.times
    if times.recurring or times.starts_at is None or times.ends_at is None:
        return times.describe()
    return f"{local_words(times.starts_at, window.zone)} to {local_words(times.ends_at, window.zone)}"


class Command(OneLineErrors, BaseCommand):
    help = "Manage maintenance windows. Subcommands: add, list, show, update, enable, disable, delete."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(
            dest="subcommand", required=True, metavar="{add,list,show,update,enable,disable,delete}"
        )
        add = sub.add_parser("add", help="Make a maintenance window")
        owner = add.add_mutually_exclusive_group(required=True)
        owner.add_argument("--tenant", metavar="SLUG")
        owner.add_argument("--deployment", action="store_true", help="A window of the whole deployment")
        add.add_argument("--name", required=True)
        update = sub.add_parser("update", help="Change a window")
        update.add_argument("window", metavar="WINDOW", help=WINDOW_HELP)
        for p in (add, update):
            p.add_argument(
                "--starts-at", metavar="TIME", help="A one-off window's start, ISO 8601 (no offset: in --zone)"
            )
            p.add_argument("--ends-at", metavar="TIME", help="A one-off window's end")
            p.add_argument("--cron", metavar="EXPR", help="A recurring window opens at each fire, in --zone")
            p.add_argument(
                "--duration",
                dest="duration_minutes",
                type=int,
                metavar="MINUTES",
                help="How long a recurring window stays open",
            )
            p.add_argument("--zone", metavar="ZONE", help="IANA zone (default UTC)")
            p.add_argument(
                "--action",
                dest="window_action",
                choices=("skip", "defer"),
                help="skip the fires inside, or defer them to one run at the end",
            )
            p.add_argument(
                "--running",
                dest="running_policy",
                choices=("let_finish", "cancel"),
                help="What happens to the selected jobs' running runs",
            )
            p.add_argument(
                "--tag",
                dest="tags",
                action="append",
                metavar="TAG",
                help="Select jobs with this tag (repeatable; none: every job)",
            )
            p.add_argument(
                "--kind",
                dest="target_kinds",
                action="append",
                metavar="KIND",
                help="Select jobs of this target kind: task, http, command, sql (repeatable)",
            )
            p.add_argument("--description", metavar="D")
        lst = sub.add_parser("list", help="List windows")
        lst.add_argument("--tenant", metavar="SLUG", default="", help="Only this tenant's (and the deployment's)")
        for name, text in (
            ("show", "Show a window"),
            ("enable", "Enable a window"),
            ("disable", "Disable a window"),
            ("delete", "Delete a window"),
        ):
            sub.add_parser(name, help=text).add_argument("window", metavar="WINDOW", help=WINDOW_HELP)

    def handle(self, *args, subcommand: str, **options) -> None:
        self.run_action("windows", subcommand, **options)

    @staticmethod
    def fields_of(options: dict) -> dict:
        given = {
            "starts_at": options.get("starts_at"),
            "ends_at": options.get("ends_at"),
            "cron": options.get("cron"),
            "duration_minutes": options.get("duration_minutes"),
            "zone": options.get("zone"),
            "action": options.get("window_action"),
            "running_policy": options.get("running_policy"),
            "tags": options.get("tags"),
            "target_kinds": options.get("target_kinds"),
            "description": options.get("description"),
        }
        return {key: value for key, value in given.items() if value is not None}

    def do_add(self, *, tenant: str | None, deployment: bool, name: str, **options) -> None:
        owner = None
        if not deployment:
            assert tenant is not None  # --tenant or --deployment: a required group
            owner = services.tenant_by_slug(tenant)
        window = window_create(owner, name=name, actor="cli", refuse_over=True, **self.fields_of(options))
        self.stdout.write(f"Created maintenance window {label_of(window)}: {self.summary(window)}")

    def do_update(self, *, window: str, **options) -> None:
        found = window_update(find_window(window), actor="cli", **self.fields_of(options))
        self.stdout.write(f"Updated maintenance window {window}: {self.summary(found)}")

    def do_enable(self, *, window: str, **options) -> None:
        window_update(find_window(window), actor="cli", enabled=True)
        self.stdout.write(f"Enabled maintenance window {window}")

    def do_disable(self, *, window: str, **options) -> None:
        window_update(find_window(window), actor="cli", enabled=False)
        self.stdout.write(f"Disabled maintenance window {window}")

    def do_list(self, *, tenant: str, **options) -> None:
        windows = MaintenanceWindow.objects.select_related("tenant").order_by("tenant__slug", "name")
        if tenant:
            windows = windows.filter(tenant=services.tenant_by_slug(tenant)) | windows.filter(tenant__isnull=True)
        now = db_now()
        rows = [
            (
                w.tenant.slug if w.tenant_id else "(deployment)",
                w.name,
                *state_of(w, now),
                span_text(w),
                w.action,
                w.running_policy,
                ", ".join(w.tags) or "-",
                ", ".join(w.target_kinds) or "-",
            )
            for w in windows
        ]
        if not rows:
            self.stdout.write("(no maintenance windows)")
            return
        self.stdout.write(
            format_table(["tenant", "name", "state", "now", "times", "action", "running", "tags", "kinds"], rows)
        )

    def do_show(self, *, window: str, **options) -> None:
        found = find_window(window)
        self.stdout.write(f"maintenance window {label_of(found)}: {self.summary(found)}")
        if found.description:
            self.stdout.write(f"description: {found.description}")
        self.stdout.write(f"now: {when_text(found, db_now())}")

    def do_delete(self, *, window: str, **options) -> None:
        window_delete(find_window(window), actor="cli")
        self.stdout.write(f"Deleted maintenance window {window}")

    @staticmethod
    def summary(window: MaintenanceWindow) -> str:
        selector = []
        if window.tags:
            selector.append("tags " + ", ".join(window.tags))
        if window.target_kinds:
            selector.append("kinds " + ", ".join(window.target_kinds))
        return (
            f"{span_text(window)}, {window.action} fires, {window.running_policy} running runs, "
            f"jobs: {' and '.join(selector) or 'all'}{'' if window.enabled else ' (disabled)'}"
        )
