"""A tenant's named business-day calendars, and their dates as the pure
schedules.BusinessCalendar (public holidays read from the `holidays` package here, since
schedules/ imports nothing)."""

from __future__ import annotations

from datetime import date, datetime
from functools import lru_cache

import holidays
from django.db import models

from scheduler_app import schedules
from scheduler_app.models.tenants import Tenant

# Years around the current one whose public holidays a calendar's dates hold: enough for
# the beat's next fires and a preview; further out only weekdays and hand-added dates count.
YEARS_BEFORE, YEARS_AFTER = 1, 5


CALENDAR_NAME_UNIQUE = "calendar_name_unique_per_tenant"  # services tell a name taken from other errors by it


class Calendar(models.Model):
    """Business days for jobs: weekdays, a country's (and subdivision's) public holidays,
    extra holidays by hand ({"YYYY-MM-DD": "name"}) and extra business days (which win)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="calendars")
    name = models.CharField(max_length=64)
    description = models.CharField(max_length=500, blank=True, default="", db_default="")
    country = models.CharField(
        max_length=8,
        blank=True,
        default="",
        db_default="",
        help_text="ISO 3166 code of the country whose public holidays count (blank: none)",
    )
    subdivision = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text="The country's subdivision code (state, province), blank for national holidays",
    )
    # Digits 0 (Monday) .. 6 (Sunday), in order: "01234" is Monday to Friday.
    weekdays = models.CharField(
        max_length=7, default="01234", db_default="01234", help_text="Business weekdays as digits, 0 Monday .. 6 Sunday"
    )
    extra_holidays = models.JSONField(
        default=dict,
        blank=True,
        db_default=models.Value({}, models.JSONField()),
        help_text='Non-business dates by hand: {"YYYY-MM-DD": "name"}',
    )
    extra_business_days = models.JSONField(
        default=list,
        blank=True,
        db_default=models.Value([], models.JSONField()),
        help_text='Business dates over weekdays and holidays: ["YYYY-MM-DD"]',
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name=CALENDAR_NAME_UNIQUE),
        ]

    def __str__(self) -> str:
        return self.name

    def business_calendar(self, year: int) -> schedules.BusinessCalendar:
        """The calendar's dates for the years around `year` (cached by id and updated_at)."""
        return business_calendar_of(
            self.id,
            self.updated_at,
            year,
            self.name,
            self.country,
            self.subdivision,
            tuple(int(d) for d in self.weekdays),
            tuple(sorted(self.extra_holidays.items())),
            tuple(self.extra_business_days),
        )


@lru_cache(maxsize=512)
def business_calendar_of(
    calendar_id: int,
    updated_at: datetime | None,
    year: int,
    name: str,
    country: str,
    subdivision: str,
    weekdays: tuple[int, ...],
    extra_holidays: tuple[tuple[str, str], ...],
    extra_business_days: tuple[str, ...],
) -> schedules.BusinessCalendar:
    """Build once per (calendar, version, year): reading a country's holidays for several
    years is far dearer than a turn's planning of the calendar's jobs."""
    names = dict(public_holidays(country, subdivision, range(year - YEARS_BEFORE, year + YEARS_AFTER + 1)))
    for day, holiday in extra_holidays:
        names[date.fromisoformat(day)] = holiday or "extra holiday"
    return schedules.BusinessCalendar(
        name=name,
        weekdays=frozenset(weekdays),
        holidays=frozenset(names),
        business_days=frozenset(date.fromisoformat(day) for day in extra_business_days),
        names=names,
    )


def business_calendars(ids, year: int) -> dict[int, schedules.BusinessCalendar]:
    """The BusinessCalendar of each calendar in `ids`, by id, for the years around `year`:
    one query, and none for no ids. What the beat plans with (dispatch/plan.py) and what the
    dashboard's forecast counts with."""
    ids = {calendar_id for calendar_id in ids if calendar_id is not None}
    if not ids:
        return {}
    return {calendar.id: calendar.business_calendar(year) for calendar in Calendar.objects.filter(id__in=ids)}


def public_holidays(country: str, subdivision: str, years: range) -> dict[date, str]:
    """A country's (and subdivision's) public holidays in `years`, by date; {} without a country."""
    if not country:
        return {}
    return dict(holidays.country_holidays(country, subdiv=subdivision or None, years=years).items())


def supported_countries() -> dict[str, list[str]]:
    """Country codes the holidays package knows, each with its subdivision codes."""
    return holidays.list_supported_countries()
