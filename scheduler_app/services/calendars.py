"""Business-day calendars: created, updated, deleted (refused while jobs use one), looked up
by name within a tenant, and a job's calendar and policy checked.

An edit of a calendar moves the next fires of its enabled jobs (a holiday added for
tomorrow must reach a job whose next_run_at was computed before it), in the same
transaction, and wakes sleeping beats.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from django.db import IntegrityError, transaction

from scheduler_app import schedules
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import CALENDAR_NAME_UNIQUE, AuditEvent, Calendar, Job, Tenant, db_now, supported_countries
from scheduler_app.services.common import violates
from scheduler_app.validation import InvalidInput, check_line, check_name

WEEKDAY_CODES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_EXTRA_DATES = 1000
CALENDAR_FIELDS = ("description", "country", "subdivision", "weekdays", "extra_holidays", "extra_business_days")
_RANGE = re.compile(r"^(\w+)-(\w+)$")


def check_country(country, subdivision) -> tuple[str, str]:
    """The country and subdivision codes, checked against the holidays package's lists."""
    country = (country or "").strip().upper()
    subdivision = (subdivision or "").strip().upper()
    if not country:
        if subdivision:
            raise InvalidInput("subdivision", "needs a country")
        return "", ""
    known = supported_countries()
    if country not in known:
        raise InvalidInput(
            "country",
            f"unknown country code {country!r} (ISO 3166 alpha-2, as the holidays "
            f"package lists them: {', '.join(sorted(known)[:12])}, ...)",
        )
    if subdivision:
        subdivisions = {code.upper(): code for code in known[country]}
        if subdivision not in subdivisions:
            listed = ", ".join(known[country]) or "none"
            raise InvalidInput("subdivision", f"unknown subdivision {subdivision!r} of {country} (known: {listed})")
        subdivision = subdivisions[subdivision]
    return country, subdivision


def _weekday(text) -> int:
    if isinstance(text, int) and not isinstance(text, bool) and 0 <= text <= 6:
        return text
    if isinstance(text, str):
        word = text.strip().lower()[:3]
        if word in WEEKDAY_CODES:
            return WEEKDAY_CODES.index(word)
        if word.isdigit() and 0 <= int(word) <= 6:
            return int(word)
    raise InvalidInput("weekdays", f"{text!r} is not a weekday (0 Monday .. 6 Sunday, or mon .. sun)")


def check_weekdays(weekdays) -> str:
    """Business weekdays as stored ("01234"), from a list (["mon", 4]) or text ("mon-fri",
    "mon,wed,fri", "01234")."""
    if isinstance(weekdays, str):
        text = weekdays.strip().lower()
        if text.isdigit():
            parts: list = list(text)
        else:
            parts = []
            for part in text.split(","):
                if match := _RANGE.match(part.strip()):
                    low, high = _weekday(match.group(1)), _weekday(match.group(2))
                    if high < low:
                        raise InvalidInput("weekdays", f"{part.strip()!r} runs backwards")
                    parts.extend(range(low, high + 1))
                elif part.strip():
                    parts.append(part)
    elif isinstance(weekdays, list | tuple):
        parts = list(weekdays)
    else:
        raise InvalidInput("weekdays", "must be a list of weekdays or text such as 'mon-fri'")
    days = sorted({_weekday(part) for part in parts})
    if not days:
        raise InvalidInput("weekdays", "must name at least one business weekday")
    return "".join(str(day) for day in days)


def _date(field: str, text) -> str:
    if isinstance(text, date):
        return text.isoformat()
    try:
        return date.fromisoformat(str(text).strip()).isoformat()
    except ValueError:
        raise InvalidInput(field, f"{text!r} is not a date (YYYY-MM-DD)") from None


def check_extra_holidays(value) -> dict[str, str]:
    """Hand-added holidays: {"YYYY-MM-DD": "name"}, or a list of dates (named "extra holiday")."""
    if value is None:
        return {}
    if isinstance(value, list | tuple):
        value = {item: "" for item in value}
    if not isinstance(value, dict):
        raise InvalidInput("extra_holidays", 'must be {"YYYY-MM-DD": "name"} or a list of dates')
    if len(value) > MAX_EXTRA_DATES:
        raise InvalidInput("extra_holidays", f"at most {MAX_EXTRA_DATES} dates")
    checked = {}
    for day, name in value.items():
        checked[_date("extra_holidays", day)] = check_line("extra_holidays", name or "")[:100]
    return dict(sorted(checked.items()))


def check_extra_business_days(value) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InvalidInput("extra_business_days", "must be a list of dates (YYYY-MM-DD)")
    if len(value) > MAX_EXTRA_DATES:
        raise InvalidInput("extra_business_days", f"at most {MAX_EXTRA_DATES} dates")
    return sorted({_date("extra_business_days", day) for day in value})


def check_calendar_fields(fields: dict) -> dict:
    """The calendar's stored fields from what a user gave (only the keys given)."""
    unknown = set(fields) - set(CALENDAR_FIELDS)
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a calendar field")
    checked: dict[str, object] = {}
    if "country" in fields or "subdivision" in fields:
        checked["country"], checked["subdivision"] = check_country(fields.get("country"), fields.get("subdivision"))
    if "weekdays" in fields:
        checked["weekdays"] = check_weekdays(fields["weekdays"])
    if "extra_holidays" in fields:
        checked["extra_holidays"] = check_extra_holidays(fields["extra_holidays"])
    if "extra_business_days" in fields:
        checked["extra_business_days"] = check_extra_business_days(fields["extra_business_days"])
    if "description" in fields:
        checked["description"] = check_line("description", fields["description"] or "")[:500]
    return checked


def calendar_get(tenant: Tenant, name: str) -> Calendar:
    """The tenant's calendar called `name`; InvalidInput("calendar") when it has none."""
    found = Calendar.objects.filter(tenant=tenant, name=name).first() if isinstance(name, str) else None
    if found is None:
        raise InvalidInput("calendar", f"tenant {tenant.slug!r} has no calendar {name!r}")
    return found


def calendar_create(tenant: Tenant, *, name: str, actor: str = "", **fields) -> Calendar:
    name = check_name("name", name, max_length=64)
    checked = check_calendar_fields({"weekdays": "01234", **fields})
    if "country" not in checked:
        checked["country"], checked["subdivision"] = "", ""
    try:
        with transaction.atomic():
            calendar = Calendar.objects.create(tenant=tenant, name=name, **checked)
            _audit(calendar, "calendar.created", actor, checked)
    except IntegrityError as exc:
        if not violates(exc, Calendar, CALENDAR_NAME_UNIQUE):
            raise
        raise InvalidInput("name", f"tenant {tenant.slug!r} already has a calendar {name!r}") from None
    return calendar


def calendar_update(calendar: Calendar, *, actor: str = "", **fields) -> Calendar:
    """Change the given fields; the next fires of the calendar's enabled jobs move with them."""
    if "subdivision" in fields and "country" not in fields:
        fields["country"] = calendar.country
    if "country" in fields and "subdivision" not in fields:
        fields["subdivision"] = calendar.subdivision if fields["country"] == calendar.country else ""
    checked = check_calendar_fields(fields)
    with transaction.atomic():
        for name, value in checked.items():
            setattr(calendar, name, value)
        calendar.save()
        moved = calendar_jobs_refire(calendar)
        _audit(calendar, "calendar.updated", actor, {**checked, "jobs_moved": moved})
    if moved:
        wake_beats()
    return calendar


def calendar_jobs_refire(calendar: Calendar) -> int:
    """Recompute next_run_at of the calendar's enabled repeating jobs from now; return how
    many moved. Runs in the caller's transaction."""
    now = db_now()
    moved = 0
    for job in Job.objects.select_for_update().filter(calendar=calendar, enabled=True, run_at__isnull=True):
        job.calendar = calendar
        next_run_at = schedules.next_fire_after(job.schedule, now - timedelta(microseconds=1))
        if next_run_at != job.next_run_at:
            Job.objects.filter(id=job.id).update(next_run_at=next_run_at)
            moved += 1
    return moved


def calendar_delete(calendar: Calendar, *, actor: str = "") -> None:
    """Delete a calendar no job uses; InvalidInput("calendar") names the jobs that do."""
    with transaction.atomic():
        users = list(Job.objects.filter(calendar=calendar).order_by("name").values_list("name", flat=True)[:6])
        if users:
            shown = ", ".join(users[:5]) + (", ..." if len(users) > 5 else "")
            raise InvalidInput(
                "calendar", f"calendar {calendar.name!r} is used by jobs {shown}; move them to another calendar first"
            )
        _audit(calendar, "calendar.deleted", actor, {})
        calendar.delete()


def job_calendar(tenant: Tenant, name, policy) -> tuple[Calendar | None, str]:
    """A job's calendar (by name, in its own tenant; "" for none) and policy, checked."""
    try:
        policy = schedules.CalendarPolicy(policy or schedules.CalendarPolicy.SKIP)
    except ValueError:
        choices = ", ".join(p.value for p in schedules.CalendarPolicy)
        raise InvalidInput("calendar_policy", f"must be one of {choices}") from None
    if not name:
        return None, policy.value
    return calendar_get(tenant, name), policy.value


def _audit(calendar: Calendar, action: str, actor: str, detail: dict) -> None:
    AuditEvent.objects.create(
        tenant_id=calendar.tenant_id, action=action, actor=actor, detail={"calendar": calendar.name, **detail}
    )
