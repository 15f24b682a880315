"""A JSON parser that refuses what PostgreSQL, our validators or a reader would choke on.

Refused with 400 (413 for size), naming the field path where there is one: bodies over
CRONFLEET_API_MAX_BODY_BYTES, bytes that are not UTF-8, nesting deeper than MAX_DEPTH,
NaN / Infinity / numbers that overflow a float (1e309), integers too long to convert, NUL
characters (jsonb cannot store them) and lone surrogates (no UTF-8 form) in any string or
key, and duplicate keys (which of the two was meant?).
"""

from __future__ import annotations

import json
import re

from rest_framework import status
from rest_framework.parsers import BaseParser

from scheduler_app.api.errors import ApiError, PayloadTooLarge
from scheduler_app.conf import app_settings
from scheduler_app.validation import MAX_DEPTH  # the same bound as a declared job's fields

_SURROGATE = re.compile("[\ud800-\udfff]")


class NonFinite:
    """Stands in for NaN, Infinity or an overflowing float until its path is known."""

    def __init__(self, text: str) -> None:
        self.text = text


class DuplicateKey(ValueError):
    pass


def _float(text: str):
    value = float(text)
    return value if value not in (float("inf"), float("-inf")) else NonFinite(text)


def _object(pairs: list[tuple[str, object]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


def check_body_headers(request) -> None:
    """Refuse a body from its headers alone, before anything is read: too large (413), or
    untyped (DRF would silently read it as empty)."""
    limit = app_settings.API_MAX_BODY_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ApiError("Content-Length", "must be a whole number") from None
    if length > limit:
        raise PayloadTooLarge(limit)
    if length and not request.META.get("CONTENT_TYPE"):
        raise ApiError("Content-Type", "must be application/json", status.HTTP_415_UNSUPPORTED_MEDIA_TYPE)


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = app_settings.API_MAX_BODY_BYTES
        raw = stream.read(limit + 1)  # a body sent without Content-Length is capped here
        if len(raw) > limit:
            raise PayloadTooLarge(limit)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError("body", f"is not valid UTF-8 (byte {exc.start})") from None
        try:
            data = json.loads(text, parse_float=_float, parse_constant=NonFinite, object_pairs_hook=_object)
        except RecursionError:
            raise ApiError("body", f"must not nest deeper than {MAX_DEPTH} levels") from None
        except json.JSONDecodeError as exc:
            raise ApiError("body", f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
        except DuplicateKey as exc:
            raise ApiError("body", f"has the key {exc.args[0]!r} twice in one object") from None
        except ValueError:  # int() refuses integers of more than 4300 digits
            raise ApiError("body", "holds a number too long to read") from None
        check_values(data, ())
        return data


def check_values(value, path: tuple[str, ...]) -> None:
    """Walk the parsed body; raise ApiError naming the path of the first bad value."""
    if len(path) > MAX_DEPTH:
        raise ApiError("body", f"must not nest deeper than {MAX_DEPTH} levels")
    field = ".".join(path) or "body"
    if isinstance(value, str):
        check_text(field, value)
    elif isinstance(value, NonFinite):
        raise ApiError(field, f"must be a finite number ({value.text} is not one)")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(field, key, what="a key")
            check_values(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_values(item, (*path, str(index)))


def check_text(field: str, text: str, *, what: str = "text") -> None:
    if "\x00" in text:
        raise ApiError(field, f"{what} must not contain NUL (\\u0000) characters")
    if _SURROGATE.search(text):
        raise ApiError(field, f"{what} must not contain lone surrogates (\\ud800-\\udfff)")
