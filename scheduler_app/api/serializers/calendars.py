"""A business-day calendar as written and as read. Shapes and types only: the services
(services/calendars.py) check the codes, weekdays and dates and name the field."""

from __future__ import annotations

from rest_framework import serializers

from scheduler_app.api.serializers.fields import StrictCharField, StrictSerializer
from scheduler_app.models import Calendar
from scheduler_app.services.calendars import MAX_EXTRA_DATES


class CalendarWriteSerializer(StrictSerializer):
    """A calendar as written: all of it to create, any part of it to PATCH."""

    read_only_names = ("id", "jobs", "created_at", "updated_at")

    name = StrictCharField(max_length=64, trim_whitespace=False)
    description = StrictCharField(required=False, allow_blank=True, max_length=500)
    country = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=8,
        help_text="ISO 3166 code whose public holidays count (the holidays package's list), e.g. GB; blank: none",
    )
    subdivision = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=16,
        help_text="The country's subdivision code, e.g. ENG; blank: national holidays",
    )
    weekdays = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        max_length=7,
        help_text="Business weekdays: 0 Monday .. 6 Sunday, or mon .. sun (default Monday to Friday)",
    )
    extra_holidays = serializers.DictField(
        child=StrictCharField(allow_blank=True, max_length=100),
        required=False,
        help_text=f'Non-business dates by hand, {{"YYYY-MM-DD": "name"}}, at most {MAX_EXTRA_DATES}',
    )
    extra_business_days = serializers.ListField(
        child=StrictCharField(max_length=10),
        required=False,
        max_length=MAX_EXTRA_DATES,
        help_text="Business dates over weekdays and holidays, YYYY-MM-DD",
    )


class CalendarSerializer(serializers.ModelSerializer):
    weekdays = serializers.SerializerMethodField(help_text="Business weekdays, 0 Monday .. 6 Sunday")
    jobs = serializers.SerializerMethodField(help_text="How many of the tenant's jobs use the calendar")

    class Meta:
        model = Calendar
        fields = (
            "id",
            "name",
            "description",
            "country",
            "subdivision",
            "weekdays",
            "extra_holidays",
            "extra_business_days",
            "jobs",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    def get_weekdays(self, calendar: Calendar) -> list[int]:
        return [int(day) for day in calendar.weekdays]

    def get_jobs(self, calendar: Calendar) -> int:
        return calendar.jobs.count()
