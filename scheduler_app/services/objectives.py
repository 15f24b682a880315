"""Fleet objectives (docs/objectives.md): declared, removed and looked up by name, a tenant's or
(tenant None) the fleet's. The checks name the field; each write is one transaction, audited
(a fleet-wide objective has no tenant to hold an audit row: it is logged to
scheduler_app.audit instead). Who may declare a fleet-wide objective (staff) is decided by
the callers: the admin and the commands. An objective counts the events decided from its
declaration on (ledger/objectives.py)."""

from __future__ import annotations

import logging
import math

from django.db import IntegrityError, transaction

from scheduler_app.models import (
    OBJECTIVE_NAME_UNIQUE,
    OBJECTIVE_NAME_UNIQUE_FLEET_WIDE,
    AuditEvent,
    Objective,
    ObjectiveKind,
    Tenant,
    db_now,
)
from scheduler_app.services.common import violates
from scheduler_app.validation import InvalidInput, check_name

audit_log = logging.getLogger("scheduler_app.audit")

OBJECTIVE_FIELDS = ("tag", "kind", "threshold_seconds", "target", "window_days")
MAX_WINDOW_DAYS = 90  # the hours of a window are kept; a quarter is the longest SLO window in use
MAX_THRESHOLD_SECONDS = 86400
MAX_TARGET = 0.99999  # five nines: beyond it a 28-day window allows less than one bad event in 100,000


def _whole(field: str, value, low: int, high: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(field, f"must be a whole number from {low} to {high}")
    return value


def check_target(value) -> float:
    """A fraction (0.99), or a percentage as text ("99%", "99.5"): stored as a fraction."""
    text = str(value).strip()
    percent = text.endswith("%")
    try:
        number = float(text.rstrip("%").strip())
    except ValueError:
        raise InvalidInput("target", f"{value!r} is not a number (e.g. 99.5% or 0.995)") from None
    if percent or number > 1:
        number /= 100
    if not math.isfinite(number) or not 0 < number <= MAX_TARGET:
        raise InvalidInput("target", f"must be above 0% and at most {MAX_TARGET:.3%} (e.g. 99.5% or 0.995)")
    return round(number, 8)


def check_objective_fields(fields: dict) -> dict:
    """Every stored field of an objective, checked."""
    unknown = set(fields) - set(OBJECTIVE_FIELDS)
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not an objective field")
    kind = fields.get("kind")
    if kind not in ObjectiveKind.values:
        raise InvalidInput("kind", f"{kind!r} is not one of {', '.join(ObjectiveKind.values)}")
    tag = fields.get("tag") or ""
    checked = {
        "kind": kind,
        "tag": check_name("tag", tag, max_length=100) if tag else "",
        "target": check_target(fields.get("target")),
        "window_days": _whole("window_days", fields.get("window_days", 28), 1, MAX_WINDOW_DAYS),
        "threshold_seconds": None,
    }
    threshold = fields.get("threshold_seconds")
    if kind == ObjectiveKind.START:
        if threshold is None:
            raise InvalidInput("threshold_seconds", "a start objective needs the seconds a fire may start within")
        checked["threshold_seconds"] = _whole("threshold_seconds", threshold, 1, MAX_THRESHOLD_SECONDS)
    elif threshold is not None:
        raise InvalidInput("threshold_seconds", "only a start objective has a threshold")
    return checked


def objective_get(tenant: Tenant | None, name: str) -> Objective:
    """The objective called `name` of `tenant` (None: the fleet's); InvalidInput("objective")."""
    found = Objective.objects.filter(tenant=tenant, name=name).first() if isinstance(name, str) else None
    if found is None:
        owner = f"tenant {tenant.slug!r}" if tenant is not None else "the fleet"
        raise InvalidInput("objective", f"{owner} has no objective {name!r}")
    return found


def objective_create(tenant: Tenant | None, *, name: str, actor: str = "", **fields) -> Objective:
    """Declare an objective; it counts the events decided from now on."""
    name = check_name("name", name, max_length=64)
    checked = check_objective_fields(fields)
    now = db_now()
    try:
        with transaction.atomic():
            objective = Objective.objects.create(tenant=tenant, name=name, created_at=now, counted_until=now, **checked)
            _audit(objective, "objective.created", actor, checked)
    except IntegrityError as exc:
        if not violates(exc, Objective, OBJECTIVE_NAME_UNIQUE, OBJECTIVE_NAME_UNIQUE_FLEET_WIDE):
            raise
        owner = f"tenant {tenant.slug!r}" if tenant is not None else "the fleet"
        raise InvalidInput("name", f"{owner} already has an objective {name!r}") from None
    return objective


def objective_delete(objective: Objective, *, actor: str = "") -> None:
    """Remove an objective with its counted hours."""
    with transaction.atomic():
        _audit(objective, "objective.deleted", actor, {})
        objective.delete()


def describe(objective: Objective) -> str:
    """'99.5% of runs succeed over 28 days', '99% of fires start within 60 s over 28 days'."""
    target = f"{objective.target * 100:.3f}".rstrip("0").rstrip(".") + "%"
    what = (
        f"of fires start within {objective.threshold_seconds} s"
        if objective.kind == ObjectiveKind.START
        else "of runs succeed"
    )
    scope = f" (jobs tagged {objective.tag})" if objective.tag else ""
    return f"{target} {what}{scope} over {objective.window_days} days"


def _audit(objective: Objective, action: str, actor: str, detail: dict) -> None:
    if objective.tenant_id is None:
        audit_log.info("%s %s by %s: %s", action, objective.name, actor or "-", detail)
        return
    AuditEvent.objects.create(
        tenant_id=objective.tenant_id, action=action, actor=actor, detail={"objective": objective.name, **detail}
    )
