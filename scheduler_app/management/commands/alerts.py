"""A job's alert rule and the alerts raised, from the command line:

    manage.py alerts set JOB [--no-success 26h] [--grace 1h] [--on-failure | --no-on-failure]
                             [--max-lag S] [--max-duration S] [--min-duration S] [--webhook URL]
                             [--slack URL] [--email ADDR ...] [--no-email] [--cooldown S] [--disable | --enable]
    manage.py alerts show JOB
    manage.py alerts delete JOB [--yes]
    manage.py alerts list [--tenant SLUG] [--job JOB] [--kind KIND] [--undelivered] [--limit N]

`set` changes the options given and keeps the others (a job without a rule gets one with the
defaults). Durations are "26h", "90m", "45s", "1h30m", "2d" or plain seconds; "none" stops
watching a condition. Writes go through scheduler_app.alerts (validated, audited as "cli");
a bad value ends the command with one line naming the option and exit status 2.
"""

from __future__ import annotations

import argparse
import re
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app import alerts, services
from scheduler_app.management import tables
from scheduler_app.management.jobtext import JOB_HELP, check_range, find_job
from scheduler_app.management.tables import OneLineErrors, cell, format_table, shorten_message, utc_text
from scheduler_app.models import Alert, AlertKind, AlertRule, Job

MAX_LIMIT = 1000
SHOW_ALERTS = 10
UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION = re.compile(r"(?:\d+(?:\.\d+)?[dhms])+|\d+(?:\.\d+)?")
DURATION_HELP = '"26h", "90m", "45s", "1h30m" or seconds'
# option name -> (rule field, whole seconds only, "none" allowed)
DURATIONS = {
    "no-success": ("no_success_seconds", True, True),
    "grace": ("grace_seconds", True, False),
    "max-lag": ("max_start_lag_seconds", False, True),
    "max-duration": ("max_duration_seconds", False, True),
    "min-duration": ("min_duration_seconds", False, True),
    "cooldown": ("cooldown_seconds", True, False),
}
OPTION_OF = {field: f"--{option}" for option, (field, _, _) in DURATIONS.items()} | {
    "enabled": "--disable",
    "on_failure": "--on-failure",
    "webhook_url": "--webhook",
    "chat_url": "--slack",
    "emails": "--email",
}


def parse_duration(option: str, text: str, *, whole: bool, nullable: bool) -> int | float | None:
    """Seconds from "26h", "1h30m", "45s", "90" ...; None for "none" where allowed."""
    value = text.strip().lower()
    if nullable and value in ("none", "off"):
        return None
    if not DURATION.fullmatch(value):
        raise services.InvalidInput(
            option, f"{text!r} is not a duration ({DURATION_HELP}{', or none' if nullable else ''})"
        )
    if value[-1].isdigit():
        seconds = float(value)
    else:
        seconds = sum(float(number) * UNITS[unit] for number, unit in re.findall(r"(\d+(?:\.\d+)?)([dhms])", value))
    if whole:
        if seconds != int(seconds):
            raise services.InvalidInput(option, f"{text!r} is not a whole number of seconds")
        return int(seconds)
    return int(seconds) if seconds == int(seconds) else seconds


class Command(OneLineErrors, BaseCommand):
    help = "A job's alert rule and the alerts raised. Subcommands: set, show, delete, list."
    stealth_options = ("stdin",)  # call_command("alerts", "delete", ..., stdin=...) answers the question (tests)

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{set,show,delete,list}")

        change = sub.add_parser(
            "set",
            help="Set or change a job's alert rule (the options given; others kept)",
            description="Durations are " + DURATION_HELP + "; 'none' stops watching that "
            "condition. A job without a rule gets one with the defaults "
            "(enabled, cool-down 1h, nothing watched) plus these options.",
        )
        change.add_argument("job", metavar="JOB", help=JOB_HELP)
        change.add_argument(
            "--no-success", metavar="DURATION", help="Alert when no run succeeded for this long (the dead-man's switch)"
        )
        change.add_argument("--grace", metavar="DURATION", help="... plus this much slack")
        change.add_argument(
            "--on-failure",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Alert when a run ends failed or dead",
        )
        change.add_argument("--max-lag", metavar="DURATION", help="Alert when a run starts this late or later")
        change.add_argument("--max-duration", metavar="DURATION", help="Alert when a run takes longer")
        change.add_argument("--min-duration", metavar="DURATION", help="Alert when a run succeeds faster")
        change.add_argument("--webhook", metavar="URL", help="POST each alert here, signed ('' for none)")
        change.add_argument(
            "--slack",
            metavar="URL",
            help="Post each alert to this Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat; '' for none)",
        )
        change.add_argument(
            "--email",
            metavar="ADDR",
            nargs="+",
            action="extend",
            default=None,
            help="Mail each alert to these addresses (replaces the list)",
        )
        change.add_argument("--no-email", action="store_true", help="Mail nobody")
        change.add_argument(
            "--cooldown",
            metavar="DURATION",
            help="After an alert of one kind, hold back that kind for this long (default 1h)",
        )
        enabled = change.add_mutually_exclusive_group()
        enabled.add_argument(
            "--disable", dest="enabled", action="store_false", default=None, help="Keep the rule but check nothing"
        )
        enabled.add_argument("--enable", dest="enabled", action="store_true", default=None, help="Check the rule again")

        show = sub.add_parser("show", help="A job's alert rule and its latest alerts")
        show.add_argument("job", metavar="JOB", help=JOB_HELP)

        delete = sub.add_parser("delete", help="Delete a job's alert rule (its alerts stay; asks first)")
        delete.add_argument("job", metavar="JOB", help=JOB_HELP)
        delete.add_argument("--yes", action="store_true", help="Delete without asking")

        lst = sub.add_parser("list", help="The alerts raised, newest first")
        lst.add_argument("--tenant", metavar="SLUG", default="")
        lst.add_argument("--job", metavar="JOB", default="", help=JOB_HELP)
        lst.add_argument("--kind", metavar="KIND", default="", help=", ".join(AlertKind.values))
        lst.add_argument("--undelivered", action="store_true", help="Only alerts not delivered (yet)")
        lst.add_argument("--limit", type=int, default=20, metavar="N", help=f"1-{MAX_LIMIT}, default 20")

    def handle(self, *args, action: str, **options) -> None:
        self.stdin = options.pop("stdin", None)
        self.run_action("alerts", action, **options)

    def do_set(self, *, job: str, **options) -> None:
        changes = rule_changes(options)  # every value parsed before the first query
        if not changes:
            raise services.InvalidInput("set", "give at least one option to set (see alerts set --help)")
        job = find_job(job)
        try:
            alerts.rule_set(job, changes, actor="cli")
        except services.InvalidInput as exc:  # name the option, not the rule's field
            name = exc.field.partition(".")[0]
            message = exc.message.replace("max_duration_seconds", "--max-duration").replace(", or null", ", or none")
            raise services.InvalidInput(OPTION_OF.get(name, exc.field), message) from None
        self.show(job)

    def do_show(self, *, job: str, **options) -> None:
        self.show(find_job(job))

    def do_delete(self, *, job: str, yes: bool, **options) -> None:
        job = find_job(job)
        if not AlertRule.objects.filter(job=job).exists():
            raise services.InvalidInput("job", f"{label(job)} has no alert rule")
        self.confirm(f"Delete the alert rule of {label(job)}? Its alerts stay listed.", yes=yes)
        alerts.rule_delete(job, actor="cli")
        self.stdout.write(f"Deleted the alert rule of {label(job)}.")

    def do_list(self, *, tenant: str, job: str, kind: str, undelivered: bool, limit: int, **options) -> None:
        check_range("limit", limit, 1, MAX_LIMIT)
        if kind and kind not in AlertKind.values:
            raise services.InvalidInput("kind", f"must be one of {', '.join(AlertKind.values)}")
        found = Alert.objects.select_related("job__tenant").order_by("-raised_at", "-id")
        if tenant:
            found = found.filter(tenant=services.tenant_by_slug(tenant, field="tenant"))
        if job:
            found = found.filter(job=find_job(job))
        if kind:
            found = found.filter(kind=kind)
        if undelivered:
            found = found.filter(delivered_at__isnull=True)
        self.stdout.write(alerts_table(list(found[:limit]), with_job=True))

    def show(self, job: Job) -> None:
        rule = AlertRule.objects.filter(job=job).first()
        self.stdout.write(f"alert rule of {label(job)}")
        if rule is None:
            self.stdout.write("(none: alerts set JOB ... makes one)")
        else:
            rows = [(name, field_text(name, getattr(rule, name))) for name in alerts.RULE_FIELDS]
            rows.append(("last_success_at", cell(rule.last_success_at)))
            width = max(len(name) for name, _ in rows)
            for name, value in rows:
                self.stdout.write(f"{name.ljust(width)}  {value}")
        self.stdout.write("")
        self.stdout.write(f"last {SHOW_ALERTS} alerts:")
        self.stdout.write(alerts_table(alerts.recent_alerts(job, limit=SHOW_ALERTS), with_job=False))

    def confirm(self, question: str, *, yes: bool) -> None:
        """Return when the person at the terminal answers yes (or --yes was given); never
        waits on a stdin that is not a terminal: it refuses instead."""
        if yes:
            return
        stdin = getattr(self, "stdin", None) or sys.stdin
        if stdin is None or stdin.closed or not stdin.isatty():
            raise CommandError(
                "alerts delete: not deleted: no terminal to ask for confirmation; pass --yes to go "
                "ahead without asking",
                returncode=2,
            )
        self.stdout.write(f"{question} [y/N] ", ending="")
        self.stdout.flush()
        if stdin.readline().strip().lower() not in ("y", "yes"):
            raise CommandError("alerts delete: not deleted", returncode=1)


def rule_changes(options: dict) -> dict:
    changes: dict[str, object] = {}
    for option, (field, whole, nullable) in DURATIONS.items():
        text = options.get(option.replace("-", "_"))
        if text is not None:
            changes[field] = parse_duration(f"--{option}", text, whole=whole, nullable=nullable)
    if options.get("on_failure") is not None:
        changes["on_failure"] = options["on_failure"]
    if options.get("enabled") is not None:
        changes["enabled"] = options["enabled"]
    if options.get("webhook") is not None:
        changes["webhook_url"] = options["webhook"].strip()
    if options.get("slack") is not None:
        changes["chat_url"] = options["slack"].strip()
    if options.get("email") is not None and options.get("no_email"):
        raise services.InvalidInput("--email", "give --email or --no-email, not both")
    if options.get("email") is not None:
        changes["emails"] = [address.strip() for address in options["email"]]
    elif options.get("no_email"):
        changes["emails"] = []
    return changes


def field_text(name: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name == "emails":
        return ", ".join(value) or "-"
    if name.endswith("_seconds") and value is not None:
        return f"{value:g} s ({alerts.describe_seconds(value)})" if value >= 60 else f"{value:g} s"
    return cell(value)


def alerts_table(found: list[Alert], *, with_job: bool) -> str:
    if not found:
        return "(no alerts)"
    headers = ["id", "raised_at", *(["job"] if with_job else []), "kind", "run", "suppressed", "delivery", "message"]
    rows = [
        (
            alert.id,
            alert.raised_at,
            *([f"{alert.job.tenant.slug}/{alert.job.name}"] if with_job else []),
            alert.kind,
            alert.run_id,
            alert.suppressed,
            delivery_text(alert),
            shorten_message(alert.message, 70),
        )
        for alert in found
    ]
    return format_table(headers, rows)


def delivery_text(alert: Alert) -> str:
    return tables.delivery_text(alert, utc_text, delivered="delivered")


def label(job: Job) -> str:
    return f"job {job.id} ({job.tenant.slug}/{job.name})"
