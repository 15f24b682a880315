"""Small output and error helpers shared by the `tenants` and `jobs` commands."""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from django.core.checks import Tags
from django.core.management.base import CommandError, SystemCheckError
from django.db import DatabaseError, connection

from scheduler_app import alerts, schedules
from scheduler_app.validation import InvalidInput

EMPTY = "-"


def cell(value) -> str:
    """One table cell: None and '' as '-', datetimes in UTC, control characters as spaces."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, datetime):
        return utc_text(value)
    return _printable(str(value))


def _printable(text: str) -> str:
    """`text` with control characters (line breaks, tabs, terminal escapes) as spaces."""
    if text.isprintable():
        return text
    return "".join(char if unicodedata.category(char) != "Cc" else " " for char in text)


def format_table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    """Plain left-aligned columns separated by two spaces, a dashed rule under the headers."""
    body = [[cell(value) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in body:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, expected {len(headers)}")
        widths = [max(width, len(value)) for width, value in zip(widths, row, strict=True)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(value.ljust(width) for value, width in zip(values, widths, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * width for width in widths]), *(line(row) for row in body)])


def shorten(text: str | None, width: int = 60) -> str:
    """`text` on one line, cut to `width` characters with a trailing ellipsis."""
    text = " ".join(_printable(text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def shorten_message(message: str, width: int = 60) -> str:
    """An alert's message on one line, cut to `width` characters but never before the end of
    its reason (alerts.split_message): only the context after it is cut."""
    reason, context = alerts.split_message(" ".join(_printable(message or "").split()))
    if not reason:
        return shorten(context, width)
    room = width - len(reason) - 3
    if len(reason) + 3 + len(context) <= width:
        return f"{reason} — {context}"
    return f"{reason} — {shorten(context, room)}" if room >= 8 else f"{reason} …"


def utc_text(value: datetime | None) -> str:
    if value is None:
        return EMPTY
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def local_text(value: datetime, zone_name: str) -> str:
    """`value` in the IANA zone `zone_name`, with its offset and abbreviation."""
    local = value.astimezone(schedules.zone(zone_name))
    return f"{local.isoformat(sep=' ', timespec='seconds')} {local.tzname()}"


def zone_text(value: datetime, zone_name: str) -> str:
    """`value` as a clock in the zone `zone_name` reads it, with the zone's abbreviation:
    '2026-12-06 09:30:20 CET'."""
    local = value.astimezone(schedules.zone(zone_name))
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def fire_text(value: datetime, zone_name: str) -> str:
    """One fire on one line: its time in the job's zone, and in UTC only when that zone is
    not UTC ('2026-12-06 09:30:20 CET (08:30:20Z)', '2026-12-06 08:30:20 UTC')."""
    if is_utc(zone_name):
        return zone_text(value, "UTC")
    utc = value.astimezone(UTC)
    same_day = utc.date() == value.astimezone(schedules.zone(zone_name)).date()
    return (
        f"{zone_text(value, zone_name)} ({utc:%H:%M:%SZ})"
        if same_day
        else f"{zone_text(value, zone_name)} ({utc_text(value)})"
    )


def is_utc(zone_name: str) -> bool:
    return zone_name in {"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Zulu", "Etc/Zulu", "GMT+0", "Etc/UCT", "UCT"}


def fires_table(fires: Sequence[datetime], zone_name: str, *, notes: Sequence[str | None] = ()) -> str:
    """Fire times numbered from 1: one time per fire in the job's zone, with a UTC column only
    when that zone is not UTC; a "note" column when any of `notes` (one per fire: a DST
    anomaly, a fire the job's calendar skips or moves) is set."""
    headers = ["#", zone_name] if is_utc(zone_name) else ["#", zone_name, "UTC"]
    rows = [
        (index, zone_text(fire, zone_name), *(() if is_utc(zone_name) else (utc_text(fire),)))
        for index, fire in enumerate(fires, 1)
    ]
    if any(notes):
        return format_table([*headers, "note"], [(*row, note) for row, note in zip(rows, notes, strict=True)])
    return format_table(headers, rows)


def preview_table(fires: Sequence[dict], zone_name: str) -> str:
    """fires_table of a preview (services.schedule_preview): each fire's DST anomaly and
    what the job's calendar does to it (skipped, or moved) in its note."""
    return fires_table(
        [fire["utc"] for fire in fires],
        zone_name,
        notes=["; ".join(filter(None, (fire["anomaly"], fire["calendar"]))) for fire in fires],
    )


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """'1 run', '3 runs', '0 runs'."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def delivery_text(alert, at: Callable[[datetime], str], *, delivered: str | None = None) -> str:
    """An alert's delivery: when it was delivered (or `delivered`, the word) and where to,
    sent nowhere (no channel), not sent yet,
    failing and retrying, or given up; with the number of attempts and the last error a
    channel answered. `at` writes a time (the admin's or the commands' format)."""
    if alert.delivered_at:
        where = alerts.where_sent(alert)
        return (delivered or at(alert.delivered_at)) + (f" to {where}" if where else "")
    if alerts.delivery_status(alert) == "no_channel":
        return "not sent: no channel (its rule has no webhook, no chat hook and no e-mail)"
    errors = [entry.get("error") for entry in alert.delivery_log or [] if entry.get("error")]
    last = f"; last error: {shorten(str(errors[-1]), 200)}" if errors else ""
    tries = plural(alert.delivery_attempts, "attempt")
    if alert.delivery_attempts >= alerts.DELIVERY_ATTEMPTS:
        return f"failed, gave up after {tries}{last}"
    if alert.next_delivery_at is None:
        return "not sent (over its tenant's alert budget)"
    if alert.delivery_attempts == 0:
        return "not sent yet"
    return f"failing, retrying at {at(alert.next_delivery_at)} ({tries} so far{last})"


def describe_schedule(cron: str, zone_name: str, every: int | None, run_at: datetime | None) -> str:
    """The short schedule text ('cron 0 3 * * * (Europe/Berlin)', 'every 60s', 'once at ...')."""
    if cron:
        return f"cron {cron} ({zone_name})"
    if every is not None:
        return schedules.every_text(every)
    return f"once at {utc_text(run_at)}"


NO_TABLES = "the database has no Cronfleet tables: run ./manage.py migrate"
# What SQLite, PostgreSQL and MariaDB say of a table that is not there.
MISSING_TABLE = re.compile(r"no such table: |relation \"[^\"]+\" does not exist|Table '[^']+' doesn't exist")


def missing_tables(exc: BaseException) -> bool:
    """Whether `exc` is a query on a table the database does not have: a database never
    migrated (an empty SQLite file, a fresh PostgreSQL database)."""
    return isinstance(exc, DatabaseError) and MISSING_TABLE.search(str(exc)) is not None


def require_tables() -> None:
    """For a command that would otherwise retry a missing table for ever (runbeat): refuse
    to start on a database never migrated."""
    from scheduler_app.models import Job  # here: the models are ready once a command runs

    if Job._meta.db_table not in connection.introspection.table_names():
        raise CommandError(NO_TABLES, returncode=1)


# The system checks a Cronfleet command runs: Django's on models and Cronfleet's own. Not the
# URL checks, which import the whole URLconf (the REST API and its schema libraries), nor the
# admin's, which import every template tag library: most of what the checks cost, for commands
# that serve no page (`manage.py check` and runserver still run them).
COMMAND_CHECKS = [Tags.models, Tags.compatibility, "cronfleet"]


class OneLineErrors:
    """Mixin for commands: from the command line a CommandError prints as the single line
    `<message>` (no 'CommandError:' prefix, no traceback) and exits with its returncode.

    call_command() still raises the CommandError, so callers and tests can catch it.
    """

    requires_system_checks = COMMAND_CHECKS

    def run_action(self, command: str, action: str, **options) -> None:
        """Call self.do_<action>; bad input becomes one line naming the field (exit 2)."""
        try:
            getattr(self, f"do_{action.replace('-', '_')}")(**options)
        except InvalidInput as exc:
            raise CommandError(f"{command} {action}: {exc.field}: {exc.message}", returncode=2) from None

    def execute(self, *args, **options):
        try:
            try:
                return super().execute(*args, **options)
            except DatabaseError as exc:
                if not missing_tables(exc):
                    raise
                raise CommandError(NO_TABLES, returncode=1) from None
        except CommandError as exc:
            if (
                not getattr(self, "_called_from_command_line", False)
                or options.get("traceback")
                or isinstance(exc, SystemCheckError)
            ):
                raise
            self.stderr.write(str(exc))
            sys.exit(exc.returncode)
