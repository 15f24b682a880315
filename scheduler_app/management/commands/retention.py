"""Show and set the retention of finished runs from the command line:

    manage.py retention show [--tenant SLUG | --job JOB]
    manage.py retention set (--tenant SLUG | --job JOB) [--days N] [--failed-days N] [--keep-last N]
    manage.py retention clamp      # once after upgrading: jobs' values above their tenant's bound are lowered

A value of `inherit` clears the field (a job then follows its tenant, a tenant the
CRONFLEET_RETENTION_* settings). Bad values end the command with one line naming the field
and exit status 2, as in `jobs` and `tenants`.
"""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app import services
from scheduler_app.ledger import policy as retention_policy
from scheduler_app.management.jobtext import JOB_HELP, find_job
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import Job

UNSET = object()
OPTIONS = {"days": "retention_days", "failed-days": "retention_failed_days", "keep-last": "retention_keep_last"}


def _value(text: str) -> int | None:
    if text.lower() == "inherit":
        return None
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'inherit'")
    return int(text)


class Command(OneLineErrors, BaseCommand):
    help = "Show or set how long finished runs are kept. Subcommands: show, set, clamp."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{show,set,clamp}")
        show = sub.add_parser("show", help="The policy in force for a tenant or a job (default: the settings)")
        change = sub.add_parser("set", help="Set a tenant's or a job's retention ('inherit' clears a value)")
        sub.add_parser("clamp", help="Lower every job's retention above its tenant's bound to the bound (audited)")
        for command in (show, change):
            which = command.add_mutually_exclusive_group(required=command is change)
            which.add_argument("--tenant", metavar="SLUG")
            which.add_argument("--job", metavar="JOB", help=JOB_HELP)
        for option, name in OPTIONS.items():
            change.add_argument(
                f"--{option}",
                dest=name,
                type=_value,
                default=UNSET,
                metavar="N|inherit",
                help=f"{name} (0: {'none' if option == 'keep-last' else 'forever'})",
            )

    def handle(self, *args, action: str, **options) -> None:
        self.run_action("retention", action, **options)

    def target(self, tenant: str | None, job: str | None):
        if job:
            return find_job(job)
        if tenant:
            return services.tenant_by_slug(tenant, field="tenant")
        return None

    def do_show(self, *, tenant: str | None, job: str | None, **options) -> None:
        self.show(self.target(tenant, job))

    def do_set(self, *, tenant: str | None, job: str | None, **options) -> None:
        changes = {name: options[name] for name in OPTIONS.values() if options[name] is not UNSET}
        if not changes:
            raise services.InvalidInput("retention", "give at least one of --days, --failed-days, --keep-last")
        obj = self.target(tenant, job)
        if job:
            obj = services.job_set_retention(obj, changes, actor="cli")
        else:
            obj = services.tenant_set_retention(obj, changes, actor="cli")
        self.show(obj)

    def do_clamp(self, **options) -> None:
        changed = services.clamp_all_jobs(actor="cli")
        self.stdout.write(f"{changed} job(s) lowered to their tenant's retention bound")

    def show(self, obj) -> None:
        if obj is None:
            policy, sources = retention_policy.resolve()
            described: dict = {
                "effective": {
                    "days": policy.days,
                    "failed_days": policy.kept_days(failed=True) or 0,
                    "keep_last": policy.keep_last,
                    "sources": {},
                }
            }
            title = "settings (CRONFLEET_RETENTION_*)"
        else:
            described = retention_policy.describe(obj)
            title = f"job {obj.tenant.slug}/{obj.name} (id {obj.id})" if isinstance(obj, Job) else f"tenant {obj.slug}"
        effective = described["effective"]
        rows = []
        for option, name in OPTIONS.items():
            short = name.removeprefix("retention_")
            value = effective[short]
            shown = (
                ("none" if value == 0 else str(value))
                if short == "keep_last"
                else ("forever" if value == 0 else f"{value} days")
            )
            rows.append(
                (
                    option,
                    "-" if obj is None else _set_text(described[name]),
                    shown,
                    effective["sources"].get(short, "settings"),
                )
            )
        self.stdout.write(title)
        self.stdout.write(format_table(["", "set here", "in force", "from"], rows))


def _set_text(value: int | None) -> str:
    return "inherit" if value is None else str(value)
