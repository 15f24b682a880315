"""A SQL job's parameters: checked against the statement's declaration (when the job is
saved and when it runs), bound for the driver, and parsed from the CLI's NAME=VALUE."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime

from scheduler_app.targets.sql.errors import InvalidSql
from scheduler_app.targets.sql.statements import RESERVED, Statement
from scheduler_app.targets.sql.values import check_value
from scheduler_app.validation import InvalidInput


def check_params(stmt: Statement, params: object) -> dict:
    """The job's parameters for ``stmt``, checked and completed with defaults (as stored)."""
    if not isinstance(params, Mapping):
        raise InvalidSql("params", "must be a mapping")
    for key in params:
        if key in RESERVED:
            raise InvalidSql(f"params.{key}", "is reserved: filled from the run, not set by a job")
        if key not in stmt.params:
            raise InvalidSql(f"params.{key}", f"unknown parameter of statement {stmt.name!r}")
    values = {}
    for pname, spec in stmt.params.items():
        field = f"params.{pname}"
        if pname in params:
            values[pname] = check_value(field, spec, params[pname], stmt.vendor)
        elif "default" in spec:
            values[pname] = check_value(field, spec, spec["default"], stmt.vendor)
        else:
            raise InvalidSql(field, "is required")
    return values


def _bind(value, vendor: str):
    """A stored value as the driver binds it: dates as date/datetime objects (naive UTC
    wall time on MariaDB, which has no zone in DATETIME), lists as arrays (PostgreSQL) or
    tuples (MariaDB's IN list)."""
    if isinstance(value, datetime):
        return value if vendor == "postgresql" else value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, list):
        bound = [_bind(item, vendor) for item in value]
        return bound if vendor == "postgresql" else tuple(bound)
    return value


def bind_values(stmt: Statement, values: Mapping, fire: Mapping) -> dict:
    """What the statement's placeholders receive: the job's checked values (dates parsed)
    and the reserved values of the fire."""
    bound = {}
    for pname in stmt.placeholders:
        if pname in RESERVED:
            bound[pname] = _bind(fire[pname], stmt.vendor)
            continue
        value, ptype = values[pname], stmt.params[pname]["type"]
        if ptype == "date":
            value = date.fromisoformat(value)
        elif ptype == "datetime":
            value = datetime.fromisoformat(value)
        bound[pname] = _bind(value, stmt.vendor)
    return bound


def parse_cli_params(name: str, items: list[str], config: Mapping) -> dict:
    """``--param K=V`` pairs for statement ``name``: numbers and booleans by the declared
    type; list parameters take every value given for their key."""
    entry = config.get(name) if isinstance(config, Mapping) else None
    specs = (entry.get("params") if isinstance(entry, Mapping) else None) or {}
    params: dict[str, object] = {}
    for item in items:
        key, found, text = item.partition("=")
        if not found or not key:
            raise InvalidInput("param", f"{item!r} is not KEY=VALUE")
        field = f"sql.params.{key}"
        ptype = (specs.get(key) or {}).get("type") if isinstance(specs.get(key), Mapping) else None
        value: object = text
        try:
            if ptype in ("int", "int_list"):
                value = int(text)
            elif ptype == "float":
                value = float(text)
        except ValueError:
            raise InvalidInput(field, f"{text!r} is not a {'number' if ptype == 'float' else 'whole number'}") from None
        if ptype == "bool":
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise InvalidInput(field, f"{text!r} is not true or false")
            value = lowered in ("true", "1", "yes")
        if ptype in ("int_list", "str_list"):
            params.setdefault(key, [])
            params[key].append(value)  # type: ignore[attr-defined]  # the list setdefault put there
        elif key in params:
            raise InvalidInput(field, "is given twice (only list parameters take several values)")
        else:
            params[key] = value
    return params
