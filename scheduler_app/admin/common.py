"""What the admin's modules share: who acts, adopting a service's row, safe form fields,
the read-only base of the ledger's lists, and how times, durations and states are shown."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.html import format_html

from scheduler_app import validation

# Jobs one pause/resume/trigger action works on; select fewer (filter first) beyond this.
ACTION_LIMIT = 500


def actor(request) -> str:
    return f"admin:{request.user}"


def adopt(obj, created) -> None:
    """Make the admin's unsaved `obj` the row a service just created, so the admin's log
    entry and redirect name the real object."""
    for field in type(created)._meta.concrete_fields:
        setattr(obj, field.attname, getattr(created, field.attname))
    obj._state.adding = False
    obj._state.db = created._state.db


class AsciiSplitDateTimeField(forms.SplitDateTimeField):
    """The admin's date and time boxes, refusing digits other than ASCII 0-9 (strptime
    reads full-width and other scripts' digits as if they were)."""

    def clean(self, value):
        for part in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(part, str):
                try:
                    validation.check_instant_text("", part)
                except validation.InvalidInput as exc:
                    raise ValidationError(exc.message) from None
        return super().clean(value)


class TagsField(forms.Field):
    """A job's tags as one line, separated by commas ('billing, nightly'), saved as the same
    list of strings the API takes (blank items dropped; the services check each tag)."""

    widget = forms.TextInput

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", "Separated by commas, e.g. billing, nightly")
        super().__init__(**kwargs)
        self.widget.attrs.setdefault("size", 60)

    def prepare_value(self, value):
        if isinstance(value, (list, tuple)):
            return ", ".join(str(tag) for tag in value)
        return value

    def to_python(self, value):
        if value in (None, ""):
            return []
        if isinstance(value, (list, tuple)):
            return [str(tag) for tag in value]
        text = str(value).strip()
        if text.startswith("["):  # a JSON list, as the field took before (and the API takes)
            try:
                listed = json.loads(text)
            except ValueError:
                raise ValidationError("Give tags separated by commas (or a JSON list of strings).") from None
            if not isinstance(listed, list) or not all(isinstance(tag, str) for tag in listed):
                raise ValidationError("Give tags separated by commas (or a JSON list of strings).")
            return listed
        return [tag.strip() for tag in text.split(",") if tag.strip()]


def jsonb_safe(value):
    """Refuse JSON that PostgreSQL's jsonb cannot store (NaN, Infinity, NUL characters)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValidationError("NaN and Infinity are not allowed") from None
    if "\\u0000" in text:
        raise ValidationError("must not contain NUL (\\u0000) characters")
    return value


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False  # one count of the filtered rows, not a second of the table
    show_facets = admin.ShowFacets.NEVER  # facet counts would count the table once per filter choice

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def when(value: datetime | None) -> str:
    """An instant as the admin shows it: the site's zone, to the second, zone named."""
    if value is None:
        return "-"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


def duration_text(seconds: float | timedelta | None) -> str:
    """'0.42 s', '12.3 s', '4 min 05 s', '2 h 03 min'; '-' for None."""
    if seconds is None:
        return "-"
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 10:
        return f"{sign}{seconds:.2f} s"
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)} min {int(seconds % 60):02d} s"
    if seconds < 86400:
        return f"{sign}{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{sign}{int(seconds // 86400)} d {int(seconds % 86400 // 3600):02d} h"


def state_badge(state: str) -> str:
    """A run state as a coloured label (styles in scheduler_app/css/console.css)."""
    return format_html('<span class="cf-state cf-{}">{}</span>', state or "none", state or "-")
