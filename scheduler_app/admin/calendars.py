"""Business-day calendars: made, changed and deleted through services/calendars.py (the
checks name the field; a calendar in use is not deleted; an edit moves its jobs' next
fires). Weekdays and dates are written as text: "mon-fri", "2026-12-24=Office closed"."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from scheduler_app import services
from scheduler_app.admin.common import actor, adopt
from scheduler_app.models import Calendar

EDITABLE = ("description", "country", "subdivision", "weekdays", "extra_holidays", "extra_business_days")


def lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").replace(",", "\n").splitlines() if line.strip()]


class CalendarForm(forms.ModelForm):
    weekdays = forms.CharField(initial="mon-fri", help_text="Business weekdays: mon-fri, mon,wed,fri or 01234")
    extra_holidays = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 4}), help_text="One a line: YYYY-MM-DD or YYYY-MM-DD=name"
    )
    extra_business_days = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One a line: YYYY-MM-DD (over weekdays and holidays)",
    )

    class Meta:
        model = Calendar
        fields = ("tenant", "name", *EDITABLE)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        saved = self.instance
        if saved.pk:
            self.initial["extra_holidays"] = "\n".join(
                f"{day}={name}" if name else day for day, name in saved.extra_holidays.items()
            )
            self.initial["extra_business_days"] = "\n".join(saved.extra_business_days)

    def clean(self):
        data = super().clean()
        holidays = dict(line.partition("=")[::2] for line in lines(data.get("extra_holidays", "")))
        given = {
            "description": data.get("description") or "",
            "country": data.get("country") or "",
            "subdivision": data.get("subdivision") or "",
            "weekdays": data.get("weekdays") or "",
            "extra_holidays": {day.strip(): name.strip() for day, name in holidays.items()},
            "extra_business_days": lines(data.get("extra_business_days", "")),
        }
        try:
            data.update(services.check_calendar_fields(given))
        except services.InvalidInput as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return data

    def _post_clean(self):
        pass  # the services validate and write; the model's own checks would refuse the text fields


@admin.register(Calendar)
class CalendarAdmin(admin.ModelAdmin):
    form = CalendarForm
    list_display = ("name", "tenant", "country", "subdivision", "weekdays", "updated_at")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    search_fields = ("name",)
    autocomplete_fields = ("tenant",)
    show_facets = admin.ShowFacets.NEVER

    def get_readonly_fields(self, request, obj=None):
        return ("tenant", "name", "created_at", "updated_at") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in EDITABLE}
        if change:
            services.calendar_update(obj, actor=actor(request), **fields)
            return
        created = services.calendar_create(
            form.cleaned_data["tenant"], name=form.cleaned_data["name"], actor=actor(request), **fields
        )
        adopt(obj, created)

    def has_delete_permission(self, request, obj=None):
        # A calendar in use is not offered for deletion (services.calendar_delete refuses it).
        return super().has_delete_permission(request, obj) and not (obj is not None and obj.jobs.exists())

    def delete_model(self, request, obj):
        try:
            services.calendar_delete(obj, actor=actor(request))
        except services.InvalidInput as exc:
            messages.error(request, exc.message)

    def delete_queryset(self, request, queryset):
        for calendar in queryset:
            self.delete_model(request, calendar)
