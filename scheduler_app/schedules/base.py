"""A schedule as stated (Schedule: cron, interval or one-off, with bounds and jitter), the
misfire policies and skip reasons, cron expressions normalised."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from cronsim import CronSim, CronSimError

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


MAX_CRON_LENGTH = 200


MAX_JITTER_SECONDS = 86400


# The longest interval we accept: 10 years. Longer ones are almost certainly a unit mistake.
MAX_EVERY_SECONDS = 10 * 366 * 86400


# Datetimes beyond this cannot be stepped past safely (datetime.max is 9999-12-31).
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)


PROBE_FROM = datetime(2000, 1, 1, tzinfo=UTC)


_ONE_VALUE_RANGE = re.compile(r"^(\w+)-\1/\d+$")


DAY = timedelta(days=1)


SECOND = timedelta(seconds=1)


MICROSECOND = timedelta(microseconds=1)


class InvalidSchedule(ValueError):
    """A schedule that cannot be accepted; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class MisfirePolicy(enum.StrEnum):
    RUN_ONCE = "run_once"  # coalesce missed fires into one run (the latest)
    RUN_ALL = "run_all"  # run every missed fire, up to a cap
    SKIP = "skip"  # run none of them


class SkipReason(enum.StrEnum):
    COALESCED = "coalesced"
    OUTSIDE_CATCHUP_WINDOW = "outside_catchup_window"
    MISFIRE_SKIP = "misfire_skip"
    RUN_ALL_CAP = "run_all_cap"


@dataclass(frozen=True)
class Schedule:
    """Exactly one of `cron`, `every` or `at` is set.

    An interval counts from `start_at` when given, else from `anchor` (fires at
    origin + k * every, k >= 0); `start_at`/`end_at` bound every kind of schedule (both
    inclusive).
    """

    cron: str = ""
    timezone: str = "UTC"
    every: int | None = None
    at: datetime | None = None
    anchor: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    # Each fire of a repeating schedule moves later by a stable offset in [0, jitter)
    # seconds, drawn from (jitter_seed, the nominal fire time): many jobs on one expression
    # spread out instead of landing on one instant. See jitter_offset().
    jitter: int = 0
    jitter_seed: int = 0
    # A business-day calendar and what a fire on another day does (schedules/calendars.py:
    # skip, next_business_day, previous_business_day); None for most jobs, which pay nothing.
    # A calendars.BusinessCalendar or None, typed as Any: calendars.py imports this module (so
    # this one cannot name it, even for the type checker alone), and `object` would refuse every use.
    calendar: Any = None
    calendar_policy: str = "skip"

    @property
    def kind(self) -> str:
        if self.cron:
            return "cron"
        if self.every is not None:
            return "interval"
        return "once"

    def describe(self) -> str:
        jitter = f" + jitter {self.jitter}s" if self.jitter else ""
        if self.calendar is not None:
            jitter += f" on business days of {self.calendar.name} ({self.calendar_policy})"
        if self.cron:
            return f"cron {self.cron} ({self.timezone}){jitter}"
        if self.every is not None:
            return f"{every_text(self.every)}{jitter}"
        return f"once at {self.at.isoformat() if self.at else '?'}"

    @property
    def nominal(self) -> Schedule:
        """The same schedule without jitter."""
        return replace(self, jitter=0, jitter_seed=0) if self.jitter else self


def normalize_cron(expression: str) -> str:
    """Return the 5-field form of `expression`, expanding nicknames; raise InvalidSchedule."""
    if not isinstance(expression, str):
        raise InvalidSchedule("cron", "must be a string")
    text = " ".join(expression.split())
    if not text:
        raise InvalidSchedule("cron", "must not be empty")
    if len(text) > MAX_CRON_LENGTH:
        raise InvalidSchedule("cron", f"must be at most {MAX_CRON_LENGTH} characters")
    if not text.isascii() or not text.isprintable():
        raise InvalidSchedule("cron", "must contain only printable ASCII characters")
    if text.startswith("@"):
        try:
            return NICKNAMES[text.lower()]
        except KeyError:
            names = ", ".join(sorted(NICKNAMES))
            raise InvalidSchedule("cron", f"unknown nickname {text!r} (known: {names})") from None
    fields = text.split(" ")
    if "=" in fields[0]:
        raise InvalidSchedule("cron", f"{fields[0]!r}: give the time zone in the timezone field, not in the expression")
    if len(fields) == 5:
        # cronsim 2.8 reads a one-value range with a step ("9-9/2") as "9/2" (9, 11, ...);
        # it means just 9.
        fields = [",".join(_ONE_VALUE_RANGE.sub(r"\1", part) for part in f.split(",")) for f in fields]
        text = " ".join(fields)
    if len(fields) != 5:
        raise InvalidSchedule(
            "cron", f"must have 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    try:
        next(CronSim(text, PROBE_FROM))
    except CronSimError as exc:
        # cronsim rejects day/month combinations that never exist ("0 0 31 2 *") here.
        raise InvalidSchedule("cron", f"{exc} in {text!r}") from None
    except StopIteration:
        raise InvalidSchedule("cron", f"{text!r} never fires") from None
    return text


def every_text(seconds: int) -> str:
    """An interval as people say it: 'every 90s' under an hour, then in the largest whole
    unit: 'every 2 days' (172800), 'every 36 h', 'every 90 min'; else in seconds."""
    if seconds < 3600:
        return f"every {seconds}s"
    if seconds % 86400 == 0:
        days = seconds // 86400
        return "every day" if days == 1 else f"every {days} days"
    if seconds % 3600 == 0:
        return f"every {seconds // 3600} h"
    if seconds % 60 == 0:
        return f"every {seconds // 60} min"
    return f"every {seconds}s"
