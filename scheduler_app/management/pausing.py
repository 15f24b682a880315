"""What the `jobs` and `pauses` commands (and the admin's dashboard) share about pauses:
the options of a pause, its end from --until or --for, who acts, and the table of paused jobs."""

from __future__ import annotations

import getpass
import re
from collections.abc import Iterable
from datetime import datetime, timedelta

from scheduler_app import alerts, schedules
from scheduler_app.management.joboptions import parse_instant
from scheduler_app.management.tables import format_table, shorten
from scheduler_app.models import Job
from scheduler_app.validation import InvalidInput

DURATION = re.compile(r"^(\d{1,6})([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
PAUSED_HEADERS = ("id", "job", "paused by", "paused for", "until", "then", "why")


def pause_end(until: str | None, for_: str | None, now: datetime) -> datetime | None:
    """The instant a pause ends: --until (ISO 8601 with an offset) or --for (30m, 2h, 7d)."""
    if until is not None and for_ is not None:
        raise InvalidInput("for", "give --until or --for, not both")
    if for_ is not None:
        found = DURATION.match(for_.strip())
        if found is None:
            raise InvalidInput("for", f"{for_!r} is not a duration such as 30m, 2h or 7d")
        return now + timedelta(seconds=int(found[1]) * UNITS[found[2]])
    return parse_instant("until", until)


def cli_actor(by: str | None) -> str:
    """Who acts: cli:<--by>, else cli:<the operating system's user>."""
    name = (by or "").strip() or getpass.getuser()
    return f"cli:{name}"


def paused_rows(jobs: Iterable[Job], now: datetime) -> list[tuple]:
    rows = []
    for job in jobs:
        age = alerts.describe(now - job.paused_at) if job.paused_at else "?"
        ended = job.paused_until is not None and job.paused_until <= now
        then = job.pause_expiry or "-"
        if ended:
            then += " (ran out)" if job.pause_expiry == "alert" else " (due)"
        rows.append(
            (
                job.id,
                f"{job.tenant.slug}/{job.name}",
                job.paused_by or "?",
                age,
                job.paused_until,
                then,
                shorten(job.paused_note or "(no reason given)", 50),
            )
        )
    return rows


def paused_table(jobs: Iterable[Job], now: datetime) -> str:
    return format_table(PAUSED_HEADERS, paused_rows(jobs, now))


def add_pause_options(parser) -> None:
    parser.add_argument("--note", default="", metavar="TEXT", help="Why (kept until resumed, 500 characters)")
    parser.add_argument("--until", metavar="INSTANT", help="When the pause ends (ISO 8601 with an offset)")
    parser.add_argument("--for", dest="for_", metavar="DURATION", help="Or how long it lasts: 30m, 2h, 7d")
    parser.add_argument(
        "--on-expiry",
        choices=schedules.EXPIRIES,
        default="",
        help="At its end: resume the jobs, or raise one alert each (paused, not healthy; the default)",
    )
