"""What a beat source's schedule, zone and priority mean to Celery, said as a job's: a crontab
written back as the cron expression that fires when it does, an interval in whole seconds,
the zone a crontab without one is read in, a message priority as this project's broker
reads it; or why no job can mean the source (Untranslatable)."""

from __future__ import annotations

from datetime import timedelta

from celery import schedules as celery_schedules
from django.conf import settings

from scheduler_app import schedules
from scheduler_app.conf import celery_broker_url
from scheduler_app.models import PRIORITY_DEFAULT, PRIORITY_MAX

# Celery's crontab field ranges: (attribute, lowest, highest).
CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day_of_month", 1, 31),
    ("month_of_year", 1, 12),
    ("day_of_week", 0, 6),
)
# Days of the month that make "the n-th <weekday>" when Celery requires both fields to match.
NTH_WEEK = {tuple(range(7 * n - 6, 7 * n + 1)): n for n in range(1, 5)}


class Untranslatable(ValueError):
    """A source that no job can mean; the message says why."""


def field_text(values, low: int, high: int) -> str:
    """A cron field selecting exactly `values` (Celery's expanded set) out of low..high."""
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    step = ordered[1] - ordered[0] if len(ordered) >= 3 else 0
    if step > 1 and ordered == list(range(ordered[0], ordered[-1] + 1, step)):
        if ordered[0] == low and ordered[-1] + step > high:
            return f"*/{step}"  # (for day fields this also makes cron AND them, as Celery does)
        if len(ordered) >= 4:
            return f"{ordered[0]}-{ordered[-1]}/{step}"
    runs: list[list[int]] = []
    for value in ordered:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ",".join(
        str(run[0]) if len(run) == 1 else f"{run[0]},{run[1]}" if len(run) == 2 else f"{run[0]}-{run[-1]}"
        for run in runs
    )


def cron_of(crontab: celery_schedules.crontab) -> str:
    """The 5-field cron expression that fires when Celery's `crontab` does.

    Celery fires on a day that matches day-of-month AND day-of-week; cron (and cronsim) fire
    when either matches, unless one of the two fields starts with "*". Both restricted is
    written as "the n-th weekday" (day_of_month 1-7 with Monday: 1#1) when it is one, or
    with a "*/k" field, or refused.
    """
    minute, hour, dom, month, dow = (field_text(getattr(crontab, name), low, high) for name, low, high in CRON_FIELDS)
    if not dom.startswith("*") and not dow.startswith("*"):
        week = NTH_WEEK.get(tuple(sorted(crontab.day_of_month)))
        if week is None:
            raise Untranslatable(
                f"day_of_month {dom} and day_of_week {dow} are both set: Celery fires on days matching both, "
                "a cron expression on days matching either, and no cron expression says this one"
            )
        dom, dow = "*", ",".join(f"{day}#{week}" for day in sorted(crontab.day_of_week))
    return f"{minute} {hour} {dom} {month} {dow}"


def crontab_schedule(crontab: celery_schedules.crontab, zone_name: str) -> str:
    """cron_of(crontab), checked as a job's schedule would be (one that never fires is refused)."""
    cron = cron_of(crontab)
    try:
        schedules.validate(schedules.Schedule(cron=cron, timezone=zone_name))
    except schedules.InvalidSchedule as exc:
        raise Untranslatable(f"crontab {cron!r} ({zone_name}): {exc.message}") from None
    return cron


def interval_seconds(every: timedelta) -> int:
    seconds = every.total_seconds()
    if seconds < 1 or seconds != int(seconds):
        raise Untranslatable(f"an interval of {every} is not a whole number of seconds (the shortest is 1 s)")
    return int(seconds)


def project_zone() -> tuple[str, str]:
    """The zone Celery reads a crontab without a zone in, and the setting that decides it."""
    if getattr(settings, "CELERY_TIMEZONE", None):
        return settings.CELERY_TIMEZONE, "CELERY_TIMEZONE"
    if getattr(settings, "CELERY_ENABLE_UTC", True):
        return "UTC", "CELERY_ENABLE_UTC without CELERY_TIMEZONE"
    return settings.TIME_ZONE, "TIME_ZONE (no CELERY_TIMEZONE, CELERY_ENABLE_UTC off)"


def broker_priority(value: int | None, notes: list[str]) -> int:
    """Our priority (0-9, higher first) for a Celery message priority as this project's broker
    reads it: RabbitMQ takes the higher first, Redis (kombu) the lower first."""
    if value is None:
        return PRIORITY_DEFAULT
    capped = min(max(int(value), 0), PRIORITY_MAX)
    scheme = celery_broker_url().split("://", 1)[0]
    if scheme.startswith(("redis", "rediss", "sentinel")):
        notes.append(f"priority {value} (on Redis 0 goes first) is {PRIORITY_MAX - capped} here (9 goes first)")
        return PRIORITY_MAX - capped
    if scheme.startswith(("amqp", "pyamqp", "librabbitmq")):
        if capped != value:
            notes.append(f"priority {value} is {capped} here (0-9)")
        return capped
    notes.append(f"priority {value}: the {scheme} broker ignores priorities; kept as {capped}")
    return capped
