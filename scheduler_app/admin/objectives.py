"""Fleet objectives: declared and removed through services/objectives.py (the checks name the
field); an objective is not edited in place (its counts would mean two promises): remove it
and declare another. One with no tenant is the fleet's; the admin is for staff, who may make
those. The list and the dashboard's panel (objective_rows) show each objective's attainment
and error budget left over its window, read from its hours (ledger/objectives.window_of)."""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.contrib import admin

from scheduler_app.admin.common import actor, adopt
from scheduler_app.ledger.objectives import Window, window_of
from scheduler_app.models import Objective, db_now
from scheduler_app.services.objectives import (
    OBJECTIVE_FIELDS,
    check_objective_fields,
    describe,
    objective_create,
    objective_delete,
)
from scheduler_app.validation import InvalidInput

VIEW_PERMISSION = f"{Objective._meta.app_label}.view_{Objective._meta.model_name}"


class ObjectiveForm(forms.ModelForm):
    target = forms.CharField(help_text="The promise: a percentage (99.5%) or a fraction (0.995)")

    class Meta:
        model = Objective
        fields = ("tenant", "name", *OBJECTIVE_FIELDS)

    def clean(self):
        data = super().clean()
        given = {name: data.get(name) for name in OBJECTIVE_FIELDS}
        try:
            data.update(check_objective_fields(given))
        except InvalidInput as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return data

    def _post_clean(self):
        pass  # the services validate and write


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}%"


def budget_state(window: Window) -> str:
    """The badge class of a budget: spent, below a quarter, or fine."""
    left = window.budget_left
    return "failed" if left <= 0 else "retrying" if left < 0.25 else "succeeded"


@admin.register(Objective)
class ObjectiveAdmin(admin.ModelAdmin):
    form = ObjectiveForm
    list_display = ("name", "tenant", "promise", "attained", "budget_left", "counted_until")
    list_filter = ("kind", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("name", "tag")
    autocomplete_fields = ("tenant",)
    show_facets = admin.ShowFacets.NEVER

    def has_change_permission(self, request, obj=None):
        return False  # declared and removed, never edited: its page is read-only

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("tenant", "name", *OBJECTIVE_FIELDS, "created_at", "counted_until", "good_events", "total_events")

    def get_changelist_instance(self, request):
        """The page's objectives, each with its window read in one query per window length."""
        changelist = super().get_changelist_instance(request)
        page = list(changelist.result_list)  # the rows the template shows (the slice caches them)
        windows = window_of(page, db_now())
        for objective in page:
            objective.counted_window = windows[objective.id]
        return changelist

    @staticmethod
    def window(objective: Objective) -> Window:
        found = getattr(objective, "counted_window", None)
        return found if found is not None else window_of([objective], db_now())[objective.id]

    @admin.display(description="promise")
    def promise(self, objective: Objective) -> str:
        return describe(objective)

    @admin.display(description="attained")
    def attained(self, objective: Objective) -> str:
        found = self.window(objective)
        return f"{percent(found.attainment)} ({found.good}/{found.total})"

    @admin.display(description="budget left")
    def budget_left(self, objective: Objective) -> str:
        return percent(self.window(objective).budget_left)

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in OBJECTIVE_FIELDS}
        created = objective_create(
            form.cleaned_data.get("tenant"), name=form.cleaned_data["name"], actor=actor(request), **fields
        )
        adopt(obj, created)

    def delete_model(self, request, obj):
        objective_delete(obj, actor=actor(request))

    def delete_queryset(self, request, queryset):
        for objective in queryset:
            self.delete_model(request, objective)


def objective_rows(now: datetime, tenant_id: int | None) -> list[dict]:
    """The dashboard's objectives (a tenant's and the fleet's; all when `tenant_id` is None),
    each with its attainment and budget left over its window."""
    objectives = Objective.objects.select_related("tenant").order_by("tenant__slug", "name")
    if tenant_id is not None:
        objectives = objectives.filter(tenant_id=tenant_id) | objectives.filter(tenant__isnull=True)
    found = list(objectives)
    windows = window_of(found, now)
    return [
        {
            "objective": objective,
            "promise": describe(objective),
            "good": windows[objective.id].good,
            "total": windows[objective.id].total,
            "attained": percent(windows[objective.id].attainment),
            "budget": percent(windows[objective.id].budget_left),
            "meter": round(max(0.0, min(1.0, windows[objective.id].budget_left)), 3),
            "state": budget_state(windows[objective.id]),
        }
        for objective in found
    ]
