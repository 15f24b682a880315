"""Business-day calendars: `manage.py calendars add --tenant SLUG --name N [--country GB
--subdivision ENG --weekdays mon-fri --holiday 2026-12-24=Office closed --business-day
2026-12-27]`, `list`, `show`, `update`, `delete`. A job refers to one with `jobs add/edit
--calendar NAME --calendar-policy P` (docs/calendars.md)."""

from __future__ import annotations

from datetime import date

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app import services
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import Calendar, db_now
from scheduler_app.schedules.calendars import WEEKDAY_NAMES

CALENDAR_HELP = "The calendar, as TENANT/NAME"
SHOW_DAYS = 15


def find_calendar(label: str) -> Calendar:
    tenant, sep, name = label.partition("/")
    if not sep:
        raise services.InvalidInput("calendar", f"{label!r}: give TENANT/NAME")
    return services.calendar_get(services.tenant_by_slug(tenant), name)


def holiday_options(values: list[str] | None) -> dict[str, str] | None:
    """--holiday DATE[=NAME], repeatable."""
    if values is None:
        return None
    pairs = (value.partition("=") for value in values)
    return {day.strip(): name.strip() for day, _, name in pairs}


def weekdays_text(digits: str) -> str:
    return ", ".join(WEEKDAY_NAMES[int(d)][:3] for d in digits)


class Command(OneLineErrors, BaseCommand):
    help = "Manage business-day calendars. Subcommands: add, list, show, update, delete."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{add,list,show,update,delete}")
        add = sub.add_parser("add", help="Make a calendar")
        add.add_argument("--tenant", required=True, metavar="SLUG")
        add.add_argument("--name", required=True)
        update = sub.add_parser("update", help="Change a calendar (its jobs' next fires move with it)")
        update.add_argument("calendar", metavar="CALENDAR", help=CALENDAR_HELP)
        for p in (add, update):
            p.add_argument("--country", metavar="CODE", help="ISO 3166 code whose public holidays count, e.g. GB")
            p.add_argument("--subdivision", metavar="CODE", help="The country's subdivision, e.g. ENG")
            p.add_argument(
                "--weekdays", metavar="DAYS", help="Business weekdays, e.g. mon-fri (the default) or 0,1,2,3"
            )
            p.add_argument(
                "--holiday",
                dest="holidays",
                action="append",
                metavar="DATE[=NAME]",
                help="An extra holiday (repeatable" + ("; replaces them all)" if p is update else ")"),
            )
            p.add_argument(
                "--business-day",
                dest="business_days",
                action="append",
                metavar="DATE",
                help="An extra business day, over weekdays and holidays (repeatable)",
            )
            p.add_argument("--description", metavar="D")
        lst = sub.add_parser("list", help="List calendars")
        lst.add_argument("--tenant", metavar="SLUG", default="", help="Only this tenant's")
        show = sub.add_parser("show", help="Show a calendar, its jobs and its next holidays")
        show.add_argument("calendar", metavar="CALENDAR", help=CALENDAR_HELP)
        delete = sub.add_parser("delete", help="Delete a calendar no job uses")
        delete.add_argument("calendar", metavar="CALENDAR", help=CALENDAR_HELP)

    def handle(self, *args, action: str, **options) -> None:
        self.run_action("calendars", action, **options)

    @staticmethod
    def fields_of(options: dict) -> dict:
        given = {
            "country": options.get("country"),
            "subdivision": options.get("subdivision"),
            "weekdays": options.get("weekdays"),
            "extra_holidays": holiday_options(options.get("holidays")),
            "extra_business_days": options.get("business_days"),
            "description": options.get("description"),
        }
        return {key: value for key, value in given.items() if value is not None}

    def do_add(self, *, tenant: str, name: str, **options) -> None:
        fields = self.fields_of(options)
        calendar = services.calendar_create(services.tenant_by_slug(tenant), name=name, actor="cli", **fields)
        self.stdout.write(f"Created calendar {tenant}/{calendar.name}: {self.summary(calendar)}")

    def do_update(self, *, calendar: str, **options) -> None:
        found = services.calendar_update(find_calendar(calendar), actor="cli", **self.fields_of(options))
        self.stdout.write(f"Updated calendar {calendar}: {self.summary(found)}")

    def do_list(self, *, tenant: str, **options) -> None:
        calendars = Calendar.objects.select_related("tenant").order_by("tenant__slug", "name")
        if tenant:
            calendars = calendars.filter(tenant=services.tenant_by_slug(tenant))
        rows = [
            (
                c.tenant.slug,
                c.name,
                c.country or "-",
                c.subdivision or "-",
                weekdays_text(c.weekdays),
                len(c.extra_holidays),
                len(c.extra_business_days),
                c.jobs.count(),
            )
            for c in calendars
        ]
        if not rows:
            self.stdout.write("(no calendars)")
            return
        self.stdout.write(
            format_table(
                [
                    "tenant",
                    "name",
                    "country",
                    "subdivision",
                    "weekdays",
                    "extra holidays",
                    "extra business days",
                    "jobs",
                ],
                rows,
            )
        )

    def do_show(self, *, calendar: str, **options) -> None:
        found = find_calendar(calendar)
        self.stdout.write(f"calendar {calendar}: {self.summary(found)}")
        if found.description:
            self.stdout.write(f"description: {found.description}")
        jobs = list(found.jobs.order_by("name").values_list("name", "calendar_policy"))
        self.stdout.write("jobs: " + (", ".join(f"{name} ({policy})" for name, policy in jobs) or "none"))
        today = db_now().date()
        business = found.business_calendar(today.year)
        # Holidays only: the weekly non-business weekdays are in the summary line.
        days = [
            day
            for day in (date.fromordinal(today.toordinal() + n) for n in range(366))
            if day in business.holidays and not business.is_business_day(day)
        ][:SHOW_DAYS]
        self.stdout.write(f"next {len(days)} holidays:")
        if days:
            self.stdout.write(
                format_table(
                    ["date", "weekday", "holiday"],
                    [(d.isoformat(), WEEKDAY_NAMES[d.weekday()], business.why_not(d)) for d in days],
                )
            )

    def do_delete(self, *, calendar: str, **options) -> None:
        services.calendar_delete(find_calendar(calendar), actor="cli")
        self.stdout.write(f"Deleted calendar {calendar}")

    @staticmethod
    def summary(calendar: Calendar) -> str:
        where = calendar.country + (f"-{calendar.subdivision}" if calendar.subdivision else "") or "no country"
        return (
            f"{where} holidays, business weekdays {weekdays_text(calendar.weekdays)}, "
            f"{len(calendar.extra_holidays)} extra holidays, {len(calendar.extra_business_days)} extra business days"
        )
