"""Maintenance windows: made, changed and deleted through services/windows.py (the checks name
the field). A window with no tenant is the whole deployment's; the admin is for staff, who
may make those. Times without an offset are read in the window's zone; the dashboard's
"in maintenance until ..." lines come from open_windows() here."""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.db.models import Q

from scheduler_app.admin.common import TagsField, actor, adopt, when
from scheduler_app.models import MaintenanceWindow, TargetKind, db_now
from scheduler_app.schedules.windows import open_at
from scheduler_app.services.windows import (
    WINDOW_FIELDS,
    check_window_fields,
    merged_fields,
    when_text,
    window_create,
    window_delete,
    window_update,
)
from scheduler_app.validation import InvalidInput


class WindowForm(forms.ModelForm):
    starts_at = forms.CharField(required=False, help_text="A one-off window's start, ISO 8601 (no offset: in the zone)")
    ends_at = forms.CharField(required=False, help_text="A one-off window's end")
    tags = TagsField(help_text="Jobs with any of these tags, separated by commas (empty: every job)")
    target_kinds = forms.MultipleChoiceField(
        choices=TargetKind.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Jobs of these target kinds (none ticked: every kind)",
    )

    class Meta:
        model = MaintenanceWindow
        fields = ("tenant", "name", *WINDOW_FIELDS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        saved = self.instance
        if saved.pk:
            for name in ("starts_at", "ends_at"):
                self.initial[name] = getattr(saved, name).isoformat() if getattr(saved, name) else ""

    def clean(self):
        data = super().clean()
        given = {name: data.get(name) for name in WINDOW_FIELDS}
        given["duration_minutes"] = data.get("duration_minutes")
        if self.instance.pk:
            given = merged_fields(self.instance, given)
        try:
            data.update(check_window_fields(given))
        except InvalidInput as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return data

    def _post_clean(self):
        pass  # the services validate and write


@admin.register(MaintenanceWindow)
class WindowAdmin(admin.ModelAdmin):
    form = WindowForm
    list_display = ("name", "tenant", "when", "state", "action", "running_policy", "enabled", "updated_at")
    list_filter = ("enabled", "action", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("name",)
    autocomplete_fields = ("tenant",)
    show_facets = admin.ShowFacets.NEVER

    @admin.display(description="when")
    def when(self, window: MaintenanceWindow) -> str:
        return window.times.describe()

    @admin.display(description="state")
    def state(self, window: MaintenanceWindow) -> str:
        """Open, closed or upcoming, and when, in the window's zone (as `windows list` says)."""
        return when_text(window, db_now())

    def get_readonly_fields(self, request, obj=None):
        return ("tenant", "name", "created_at", "updated_at") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in WINDOW_FIELDS}
        if change:
            window_update(obj, actor=actor(request), **fields)
            return
        created = window_create(
            form.cleaned_data.get("tenant"), name=form.cleaned_data["name"], actor=actor(request), **fields
        )
        adopt(obj, created)
        if created.ends_at is not None and created.ends_at <= db_now():
            messages.warning(
                request,
                f"The window {created.name!r} is already over (it ended {created.ends_at:%Y-%m-%d %H:%M} UTC): it selects nothing.",
            )

    def delete_model(self, request, obj):
        window_delete(obj, actor=actor(request))

    def delete_queryset(self, request, queryset):
        for window in queryset:
            self.delete_model(request, window)


def open_windows(now: datetime, tenant_id: int | None) -> list[dict]:
    """The enabled windows open `now` (a tenant's and the deployment's; every tenant's when
    `tenant_id` is None), each with the end of its interval, for the dashboard."""
    windows = MaintenanceWindow.objects.filter(enabled=True).select_related("tenant").order_by("id")
    if tenant_id is not None:
        windows = windows.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True))
    found = []
    for window in windows.filter(~Q(cron="") | Q(starts_at__lte=now, ends_at__gt=now)):
        interval = open_at(window.times, now)
        if interval is not None:
            found.append(
                {
                    "name": window.name,
                    "tenant": window.tenant.slug if window.tenant_id else "",
                    "until": when(interval[1]),
                    "effect": "its jobs' fires deferred to its end"
                    if window.action == "defer"
                    else "its jobs' fires skipped",
                }
            )
    return found
