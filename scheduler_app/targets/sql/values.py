"""One parameter's value checked against its declared type (int, float, bool, str, choice,
date, datetime, int_list, str_list) and limits."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime

from scheduler_app.targets import params
from scheduler_app.targets.sql.errors import INT64, InvalidSql
from scheduler_app.validation import InvalidInput, check_instant_text

_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _check_str(field: str, spec: Mapping, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidSql(field, "must be a string")
    if "\x00" in value:
        raise InvalidSql(field, "contains a NUL character (U+0000), which PostgreSQL text cannot hold; "
                                "it is refused on every database")
    for char in value:
        if "\ud800" <= char <= "\udfff":
            raise InvalidSql(field, f"contains a lone surrogate (U+{ord(char):04X})")
    if len(value) > spec["max_length"]:
        raise InvalidSql(field, f"is longer than {spec['max_length']} characters")
    if "pattern" in spec and not re.fullmatch(spec["pattern"], value):
        raise InvalidSql(field, "does not match the allowed pattern")
    return value


def _check_int(field: str, spec: Mapping, value: object) -> int:
    if not params.is_int(value):
        raise InvalidSql(field, "must be an integer")
    if not -INT64 <= value < INT64:
        raise InvalidSql(field, "must fit in 64 bits")
    params.check_bounds(field, spec, value, InvalidSql)
    return value


def _list(field: str, spec: Mapping, value: object, vendor: str) -> list:
    if not isinstance(value, list | tuple):
        raise InvalidSql(field, "must be a list")
    if len(value) > spec["max_items"]:
        raise InvalidSql(field, f"has more than {spec['max_items']} items")
    if not value and vendor == "mysql":
        raise InvalidSql(field, "must not be empty on MariaDB (IN () is a syntax error there)")
    return list(value)


def check_value(field: str, spec: Mapping, value: object, vendor: str):
    """``value`` checked against ``spec``, as JSON stores it (dates as ISO text)."""
    ptype = spec["type"]
    if ptype == "int":
        return _check_int(field, spec, value)
    if ptype == "float":
        if not params.is_number(value) or not math.isfinite(value):
            raise InvalidSql(field, "must be a finite number")
        params.check_bounds(field, spec, value, InvalidSql)
        return float(value)
    if ptype == "bool":
        if not isinstance(value, bool):
            raise InvalidSql(field, "must be true or false")
        return value
    if ptype == "str":
        return _check_str(field, spec, value)
    if ptype == "choice":
        if not isinstance(value, str) or value not in spec["choices"]:
            raise InvalidSql(field, f"must be one of {list(spec['choices'])}")
        return value
    if ptype == "date":
        if not isinstance(value, str) or not _ISO_DATE.fullmatch(value):
            raise InvalidSql(field, "must be an ISO date (YYYY-MM-DD)")
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            raise InvalidSql(field, "is not a valid calendar date") from None
    if ptype == "datetime":
        if not isinstance(value, str):
            raise InvalidSql(field, "must be an ISO 8601 date and time with a UTC offset")
        try:
            check_instant_text(field, value)
            parsed = datetime.fromisoformat(value)
        except InvalidInput as exc:
            raise InvalidSql(field, exc.message) from None
        except ValueError:
            raise InvalidSql(field, f"{value!r} is not an ISO 8601 date and time") from None
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            raise InvalidSql(field, f"{value!r} has no UTC offset (naive times are refused)")
        return parsed.astimezone(UTC).isoformat()
    if ptype == "int_list":
        return [_check_int(f"{field}[{i}]", spec, item) for i, item in enumerate(_list(field, spec, value, vendor))]
    if ptype == "str_list":
        return [_check_str(f"{field}[{i}]", spec, item) for i, item in enumerate(_list(field, spec, value, vendor))]
    raise InvalidSql(f"{field}.type", f"unsupported type {ptype!r}")  # pragma: no cover
