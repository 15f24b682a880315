"""Maintenance windows: created, updated, deleted and looked up by name, a tenant's or (tenant
None) the deployment's. The checks name the field; each write is one transaction, audited
(a deployment-wide window has no tenant to hold an audit row: it is logged to
scheduler_app.audit instead) and wakes sleeping beats, so a `cancel` window opening now is
acted on at once. Who may write a deployment-wide window (staff) is decided by the callers:
the API, the admin, the commands (docs/maintenance-windows.md)."""

from __future__ import annotations

import enum
import logging
from datetime import UTC, datetime

from django.db import IntegrityError, transaction

from scheduler_app import schedules
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.models import (
    WINDOW_NAME_UNIQUE,
    WINDOW_NAME_UNIQUE_DEPLOYMENT_WIDE,
    AuditEvent,
    MaintenanceWindow,
    RunningPolicy,
    TargetKind,
    Tenant,
    WindowAction,
    db_now,
)
from scheduler_app.schedules.windows import next_opening
from scheduler_app.services.common import violates
from scheduler_app.validation import InvalidInput, check_line, check_name, check_tags

audit_log = logging.getLogger("scheduler_app.audit")

WINDOW_FIELDS = (
    "description",
    "zone",
    "starts_at",
    "ends_at",
    "cron",
    "duration_minutes",
    "action",
    "running_policy",
    "tags",
    "target_kinds",
    "enabled",
)
MAX_DURATION_MINUTES = 31 * 24 * 60  # a recurring window open longer than a month is a unit mistake


def _choice(field: str, value, choices) -> str:
    allowed = [choice.value for choice in choices]
    if value not in allowed:
        raise InvalidInput(field, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def check_zone(value) -> str:
    try:
        schedules.zone(value)
    except schedules.InvalidSchedule as exc:
        raise InvalidInput("zone", exc.message) from None
    return value


def check_instant(field: str, value, zone: str) -> datetime | None:
    """An instant from a datetime or ISO 8601 text; one without an offset is read in `zone`."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(field, f"{value!r} is not an ISO 8601 date and time") from None
    if not isinstance(value, datetime):
        raise InvalidInput(field, "must be an ISO 8601 date and time")
    if value.tzinfo is None:
        value = value.replace(tzinfo=schedules.zone(zone))
    return value.astimezone(UTC)


def check_kinds(value) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InvalidInput("target_kinds", "must be a list of target kinds (task, http, command, sql)")
    return list(dict.fromkeys(_choice("target_kinds", kind, TargetKind) for kind in value))


def check_window_fields(fields: dict) -> dict:
    """Every stored field of a window, checked, from a complete set of them."""
    unknown = set(fields) - set(WINDOW_FIELDS)
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a maintenance window field")
    zone = check_zone(fields.get("zone") or "UTC")
    checked: dict[str, object] = {
        "zone": zone,
        "description": check_line("description", fields.get("description") or "")[:500],
        "action": _choice("action", fields.get("action") or WindowAction.SKIP, WindowAction),
        "running_policy": _choice(
            "running_policy", fields.get("running_policy") or RunningPolicy.LET_FINISH, RunningPolicy
        ),
        "tags": check_tags(fields.get("tags")),
        "target_kinds": check_kinds(fields.get("target_kinds")),
    }
    enabled = fields.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidInput("enabled", "must be true or false")
    checked["enabled"] = enabled
    cron = fields.get("cron") or ""
    starts_at = check_instant("starts_at", fields.get("starts_at"), zone)
    ends_at = check_instant("ends_at", fields.get("ends_at"), zone)
    duration = fields.get("duration_minutes")
    if cron:
        try:
            checked["cron"] = schedules.normalize_cron(cron)
        except schedules.InvalidSchedule as exc:
            raise InvalidInput("cron", exc.message) from None
        if starts_at is not None or ends_at is not None:
            raise InvalidInput(
                "starts_at", "a recurring window (cron) has no starts_at or ends_at; give one or the other"
            )
        if isinstance(duration, bool) or not isinstance(duration, int) or not 1 <= duration <= MAX_DURATION_MINUTES:
            raise InvalidInput(
                "duration_minutes", f"a recurring window needs a whole number of minutes, 1 to {MAX_DURATION_MINUTES}"
            )
        checked.update(starts_at=None, ends_at=None, duration_minutes=duration)
        return checked
    if duration is not None:
        raise InvalidInput("duration_minutes", "only a recurring window (cron) has a duration; a one-off has ends_at")
    if starts_at is None:
        raise InvalidInput(
            "starts_at", "a one-off window needs starts_at and ends_at (or give cron and duration_minutes)"
        )
    if ends_at is None:
        raise InvalidInput("ends_at", "a one-off window needs ends_at")
    if ends_at <= starts_at:
        raise InvalidInput("ends_at", f"must be after starts_at ({starts_at.isoformat()})")
    checked.update(cron="", starts_at=starts_at, ends_at=ends_at, duration_minutes=None)
    return checked


def current_fields(window: MaintenanceWindow) -> dict:
    return {name: getattr(window, name) for name in WINDOW_FIELDS}


def merged_fields(window: MaintenanceWindow, changes: dict) -> dict:
    """The window's fields with `changes` over them; giving cron makes it recurring (its
    starts_at and ends_at go), giving starts_at or ends_at one-off (its cron goes)."""
    fields = current_fields(window)
    if changes.get("cron") and not {"starts_at", "ends_at"} & set(changes):
        fields.update(starts_at=None, ends_at=None)
    if {"starts_at", "ends_at"} & set(changes) and "cron" not in changes:
        fields.update(cron="", duration_minutes=None)
    return {**fields, **changes}


def window_get(tenant: Tenant | None, name: str) -> MaintenanceWindow:
    """The window called `name` of `tenant` (None: the deployment's); InvalidInput("window")."""
    found = MaintenanceWindow.objects.filter(tenant=tenant, name=name).first() if isinstance(name, str) else None
    if found is None:
        owner = f"tenant {tenant.slug!r}" if tenant is not None else "the deployment"
        raise InvalidInput("window", f"{owner} has no maintenance window {name!r}")
    return found


def window_create(
    tenant: Tenant | None, *, name: str, actor: str = "", refuse_over: bool = False, **fields
) -> MaintenanceWindow:
    """Make a window. With `refuse_over` (a person typing one: `windows add`, the API), a one-off
    window already over is refused naming ends_at: it would select nothing, ever, and is most
    likely a date typed wrong. A tenant's import keeps its past windows as they were."""
    name = check_name("name", name, max_length=64)
    checked = check_window_fields(fields)
    if refuse_over and checked["ends_at"] is not None and checked["ends_at"] <= db_now():
        raise InvalidInput("ends_at", f"the window is already over (it ended {checked['ends_at'].isoformat()})")
    try:
        with transaction.atomic():
            window = MaintenanceWindow.objects.create(tenant=tenant, name=name, **checked)
            _audit(window, "window.created", actor, checked)
            wake_beats()
    except IntegrityError as exc:
        if not violates(exc, MaintenanceWindow, WINDOW_NAME_UNIQUE, WINDOW_NAME_UNIQUE_DEPLOYMENT_WIDE):
            raise
        owner = f"tenant {tenant.slug!r}" if tenant is not None else "the deployment"
        raise InvalidInput("name", f"{owner} already has a maintenance window {name!r}") from None
    return window


def window_update(window: MaintenanceWindow, *, actor: str = "", **changes) -> MaintenanceWindow:
    checked = check_window_fields(merged_fields(window, changes))
    with transaction.atomic():
        for name, value in checked.items():
            setattr(window, name, value)
        window.save()
        _audit(window, "window.updated", actor, {name: checked[name] for name in changes if name in checked})
        wake_beats()
    return window


def window_delete(window: MaintenanceWindow, *, actor: str = "") -> None:
    with transaction.atomic():
        _audit(window, "window.deleted", actor, {})
        window.delete()


def open_or_next(window: MaintenanceWindow, now: datetime) -> tuple[datetime, datetime] | None:
    """The window's interval open now, else its next one; None when it will not open again."""
    return next_opening(window.times, now)


def plain(value):
    """An audit detail's value as JSON and a log line read it: instants in ISO 8601, a choice
    by its value ('skip', not WindowAction.SKIP)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _audit(window: MaintenanceWindow, action: str, actor: str, detail: dict) -> None:
    shown = {key: plain(value) for key, value in detail.items()}
    if window.tenant_id is None:
        audit_log.info("%s %s by %s: %s", action, window.name, actor or "-", shown)
        return
    AuditEvent.objects.create(
        tenant_id=window.tenant_id, action=action, actor=actor, detail={"window": window.name, **shown}
    )


# --- in words (the commands' list and show, the admin's list) ---------------------------


def local_words(at: datetime, zone_name: str) -> str:
    """An instant as the window's zone reads it: 'Sun 2026-12-06 22:00 CET'."""
    local = at.astimezone(schedules.zone(zone_name))
    return f"{local:%a %Y-%m-%d %H:%M} {local.tzname()}"


def state_of(window: MaintenanceWindow, now: datetime) -> tuple[str, str]:
    """(open, closed or upcoming; when, in the window's zone)."""
    found = open_or_next(window, now) if window.enabled else None
    if found is None:
        return "closed", "disabled" if not window.enabled else "over: will not open again"
    start, end = found
    if start <= now:
        return "open", f"until {local_words(end, window.zone)}"
    return "upcoming", f"opens {local_words(start, window.zone)}, until {local_words(end, window.zone)}"


def when_text(window: MaintenanceWindow, now: datetime) -> str:
    state, when = state_of(window, now)
    return f"{state}: {when}"
