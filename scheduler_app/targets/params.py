"""Typed parameter declarations, as the allow-lists of command jobs (CRONFLEET_COMMANDS)
and SQL jobs (CRONFLEET_SQL) write them: {"type": ..., plus the keys that type takes}.

check_declaration() checks what both allow-lists share (the type, its keys, bounds,
lengths, patterns, list sizes and choices); the check_* functions below check a value of
the types both have (int, str, choice, date, a list's size) and of SQL's float and
datetime. Each allow-list adds its own rules (which characters a text may hold, a 64-bit
bound, a value converted its own way).

A value a tenant sends is refused with the error class, never by an exception of the
conversion: an int of any size is finite (math.isfinite would overflow converting it), a
float parameter must fit a double, and a datetime's UTC time must fall within years 1-9999
("9999-12-31T23:59:59-23:59" is in year 10000 in UTC).
Errors are raised with the allow-list's own exception class, so each keeps naming the
field its users see.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import TypeGuard

from scheduler_app.validation import InvalidInput, check_instant_text

ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class FieldError(ValueError):
    """A declaration or a value is refused; ``field`` names what (each allow-list has its own
    subclass, InvalidCommand and InvalidSql)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def check_bounds(field: str, spec: Mapping, value, error: Callable[[str, str], Exception]) -> None:
    """Refuse `value` below the declaration's "min" or above its "max" (when it has them)."""
    if "min" in spec and value < spec["min"]:
        raise error(field, f"must be >= {spec['min']}")
    if "max" in spec and value > spec["max"]:
        raise error(field, f"must be <= {spec['max']}")


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite(value: object) -> bool:
    """A number that is neither infinite nor NaN. An int of any size is finite:
    math.isfinite(10**400) raises OverflowError (it converts to a float first)."""
    return is_int(value) or (is_number(value) and math.isfinite(value))


def check_declaration(
    field: str, spec: object, type_keys: Mapping[str, frozenset], error: Callable[[str, str], Exception]
) -> str:
    """Check one parameter's declaration `spec` against the types `type_keys` allows;
    return its type. `error(field, message)` makes the exception to raise."""
    if not isinstance(spec, Mapping):
        raise error(field, "must be a mapping")
    ptype = spec.get("type")
    if not isinstance(ptype, str) or ptype not in type_keys:
        raise error(f"{field}.type", f"unsupported type {ptype!r}; use one of {', '.join(type_keys)}")
    unknown = sorted(map(str, set(spec) - type_keys[ptype]))
    if unknown:
        raise error(f"{field}.{unknown[0]}", f"unknown key for type {ptype}")
    if ptype in ("int", "int_list", "float"):
        check, what = (is_number, "must be a number") if ptype == "float" else (is_int, "must be an integer")
        for key in ("min", "max"):
            if key in spec and (not check(spec[key]) or not is_finite(spec[key])):
                raise error(f"{field}.{key}", what)
        if "min" in spec and "max" in spec and spec["min"] > spec["max"]:
            raise error(f"{field}.min", "must not exceed max")
    if ptype in ("str", "str_list"):
        max_length = spec.get("max_length")
        if not is_int(max_length) or max_length < 1:
            raise error(f"{field}.max_length", "is required and must be a positive integer")
        if "pattern" in spec:
            if not isinstance(spec["pattern"], str):
                raise error(f"{field}.pattern", "must be a string")
            try:
                re.compile(spec["pattern"])
            except re.error as exc:
                raise error(f"{field}.pattern", f"invalid regular expression: {exc}") from None
    if ptype.endswith("_list"):
        max_items = spec.get("max_items")
        if not is_int(max_items) or max_items < 1:
            raise error(f"{field}.max_items", "is required and must be a positive integer")
    if ptype == "choice":
        choices = spec.get("choices")
        if not isinstance(choices, list | tuple) or not choices or not all(isinstance(c, str) for c in choices):
            raise error(f"{field}.choices", "must be a non-empty list of strings")
    return ptype


# --- values -------------------------------------------------------------------------------


def check_int(
    field: str, spec: Mapping, value: object, error: Callable[[str, str], Exception], *, bits: int | None = None
) -> int:
    """An integer within the declaration's bounds (and, with `bits`, that many signed bits)."""
    if not is_int(value):
        raise error(field, "must be an integer")
    if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise error(field, f"must fit in {bits} bits")
    check_bounds(field, spec, value, error)
    return value


def check_str(
    field: str,
    spec: Mapping,
    value: object,
    error: Callable[[str, str], Exception],
    problem: Callable[[str], str | None],
) -> str:
    """A text no longer than max_length that matches the pattern; `problem(value)` names a
    character the allow-list refuses (or None)."""
    if not isinstance(value, str):
        raise error(field, "must be a string")
    refused = problem(value)
    if refused:
        raise error(field, refused)
    if len(value) > spec["max_length"]:
        raise error(field, f"is longer than {spec['max_length']} characters")
    if spec.get("pattern") is not None and not re.fullmatch(spec["pattern"], value):
        raise error(field, "does not match the allowed pattern")
    return value


def check_float(field: str, spec: Mapping, value: object, error: Callable[[str, str], Exception]) -> float:
    """A finite number that a double holds, within the declaration's bounds, as a float."""
    if not is_finite(value):
        raise error(field, "must be a finite number")
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int past a double's range (about 1.8e308)
        raise error(field, "is out of range for a float (at most about 1.8e308)") from None
    check_bounds(field, spec, number, error)
    return number


def check_choice(field: str, spec: Mapping, value: object, error: Callable[[str, str], Exception]) -> str:
    if not isinstance(value, str) or value not in spec["choices"]:
        raise error(field, f"must be one of {list(spec['choices'])}")
    return value


def check_date(field: str, value: object, error: Callable[[str, str], Exception]) -> str:
    """An ISO date (YYYY-MM-DD) of the calendar, as that text."""
    if not isinstance(value, str) or not ISO_DATE.fullmatch(value):
        raise error(field, "must be an ISO date (YYYY-MM-DD)")
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise error(field, "is not a valid calendar date") from None


def check_datetime(field: str, value: object, error: Callable[[str, str], Exception]) -> datetime:
    """An ISO 8601 date and time with a UTC offset, in ASCII digits, as an aware datetime in
    UTC. Its UTC time must be a datetime too: an offset can carry a time near year 1 or 9999
    out of range (OverflowError in astimezone), which is the value's fault, not the server's."""
    if not isinstance(value, str):
        raise error(field, "must be an ISO 8601 date and time with a UTC offset")
    try:
        check_instant_text(field, value)
        parsed = datetime.fromisoformat(value)
    except InvalidInput as exc:
        raise error(field, exc.message) from None
    except ValueError:
        raise error(field, f"{value!r} is not an ISO 8601 date and time") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise error(field, f"{value!r} has no UTC offset (naive times are refused)")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise error(field, f"{value!r} is out of range: in UTC it falls outside the years 1-9999") from None


def check_items(
    field: str, spec: Mapping, value: object, error: Callable[[str, str], Exception], *, what: str = "must be a list"
) -> list:
    """A list (or tuple) of at most max_items items, as a list."""
    if not isinstance(value, list | tuple):
        raise error(field, what)
    if len(value) > spec["max_items"]:
        raise error(field, f"has more than {spec['max_items']} items")
    return list(value)
