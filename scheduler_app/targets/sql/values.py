"""One parameter's value checked against its declared type (int, float, bool, str, choice,
date, datetime, int_list, str_list) and limits."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler_app.targets import params
from scheduler_app.targets.sql.errors import InvalidSql


def _text_problem(value: str) -> str | None:
    """A character no database of SQL jobs takes in a text (or None)."""
    if "\x00" in value:
        return "contains a NUL character (U+0000), which PostgreSQL text cannot hold; it is refused on every database"
    for char in value:
        if "\ud800" <= char <= "\udfff":
            return f"contains a lone surrogate (U+{ord(char):04X})"
    return None


def _check_str(field: str, spec: Mapping, value: object) -> str:
    return params.check_str(field, spec, value, InvalidSql, _text_problem)


def _check_int(field: str, spec: Mapping, value: object) -> int:
    return params.check_int(field, spec, value, InvalidSql, bits=64)


def _list(field: str, spec: Mapping, value: object, vendor: str) -> list:
    items = params.check_items(field, spec, value, InvalidSql)
    if not items and vendor == "mysql":
        raise InvalidSql(field, "must not be empty on MariaDB (IN () is a syntax error there)")
    return items


def check_value(field: str, spec: Mapping, value: object, vendor: str):
    """``value`` checked against ``spec``, as JSON stores it (dates as ISO text)."""
    ptype = spec["type"]
    if ptype == "int":
        return _check_int(field, spec, value)
    if ptype == "float":
        return params.check_float(field, spec, value, InvalidSql)
    if ptype == "bool":
        if not isinstance(value, bool):
            raise InvalidSql(field, "must be true or false")
        return value
    if ptype == "str":
        return _check_str(field, spec, value)
    if ptype == "choice":
        return params.check_choice(field, spec, value, InvalidSql)
    if ptype == "date":
        return params.check_date(field, value, InvalidSql)
    if ptype == "datetime":
        return params.check_datetime(field, value, InvalidSql).isoformat()
    if ptype == "int_list":
        return [_check_int(f"{field}[{i}]", spec, item) for i, item in enumerate(_list(field, spec, value, vendor))]
    if ptype == "str_list":
        return [_check_str(f"{field}[{i}]", spec, item) for i, item in enumerate(_list(field, spec, value, vendor))]
    raise InvalidSql(f"{field}.type", f"unsupported type {ptype!r}")  # pragma: no cover
