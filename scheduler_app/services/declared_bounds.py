"""The bounds of a declaration (services/declared.py), the API's own: a file is read only up
to CRONFLEET_SCHEDULES_MAX_FILE_BYTES, and each declared job's fields nest no deeper than
validation.MAX_DEPTH and take no more than CRONFLEET_API_MAX_BODY_BYTES as JSON, as the
same job sent to the API would. Pure: no database, no clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scheduler_app.conf import app_settings
from scheduler_app.validation import MAX_DEPTH, InvalidInput, check_json


class TooLarge(ValueError):
    """A file over CRONFLEET_SCHEDULES_MAX_FILE_BYTES: refused unread."""


def read_text(path: Path) -> str:
    """The file's text, refused (TooLarge) without reading it when it is over the limit; a file
    growing meanwhile (or a pipe) is cut off one byte past the limit and refused all the same."""
    limit = app_settings.SCHEDULES_MAX_FILE_BYTES
    size = path.stat().st_size
    if size <= limit:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
        size = len(data)
    if size > limit:
        raise TooLarge(f"is {size} bytes, more than CRONFLEET_SCHEDULES_MAX_FILE_BYTES ({limit}); not read")
    return data.decode("utf-8")


def json_size(value) -> int:
    """Bytes of `value` as the API would receive it (JSON, date-times as ISO text)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=lambda v: v.isoformat())
    return len(text.encode("utf-8", "surrogatepass"))


def check_job(raw: dict) -> None:
    """Refuse a declared job (its table, as written) over the API's bounds, naming the field:
    nesting (validation.check_json, which also refuses NaN and NUL, as the API's parser
    does), then each field's size, then the whole job's."""
    for key, value in raw.items():
        check_json(str(key), value)
    limit = app_settings.API_MAX_BODY_BYTES
    for key, value in raw.items():
        size = json_size(value)
        if size > limit:
            raise InvalidInput(str(key), f"is {size} bytes as JSON, more than CRONFLEET_API_MAX_BODY_BYTES ({limit})")
    size = json_size(raw)
    if size > limit:
        raise InvalidInput(
            "all fields", f"are {size} bytes as JSON together, more than CRONFLEET_API_MAX_BODY_BYTES ({limit})"
        )


# --- finding what nests too deep in a TOML text ------------------------------------------


@dataclass
class Deep:
    """Where a TOML text nests past the bound: the line, the key assigned there, and the
    table it sits in (its header, and its `name` where it has one)."""

    line: int
    key: str
    table: str = ""
    name: str | None = None


def find_deep(text: str, max_depth: int = MAX_DEPTH) -> Deep | None:
    """The first assignment whose value nests arrays and inline tables deeper than max_depth.

    tomllib recurses once per level and raises RecursionError a few hundred levels down, so
    this reads the text without parsing it: it follows strings (the four kinds), comments,
    table headers and brackets, which is all it takes to tell where a value starts and how
    deep it goes. Only asked after tomllib failed so, so a rough corner costs a vaguer error,
    never a wrong accept."""
    tables: list[dict] = [{"header": "", "name": None, "deep": None}]
    i, line, depth, count = 0, 1, 0, len(text)
    key, in_value, capture = "", False, False
    while i < count:
        char = text[i]
        if char in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else char
            end = _string_end(text, i + len(quote), quote)
            if capture and depth == 0 and tables[-1]["name"] is None:
                tables[-1]["name"] = text[i + len(quote) : end - len(quote)]
            line += text.count("\n", i, end)
            i = end
            continue
        if char == "#":
            i = text.find("\n", i)
            i = count if i < 0 else i
            continue
        if char == "\n":
            line += 1
            if depth == 0:
                key, in_value, capture = "", False, False
        elif not in_value and depth == 0 and char == "[" and not key.strip():
            end = text.find("\n", i)
            end = count if end < 0 else end
            tables.append({"header": text[i:end].split("#")[0].strip(), "name": None, "deep": None})
            i = end
            continue
        elif not in_value and depth == 0:
            if char == "=":
                in_value, capture = True, key.strip() == "name"
            else:
                key += char
        elif char in "[{":
            depth += 1
            if depth > max_depth and tables[-1]["deep"] is None:
                tables[-1]["deep"] = (line, key.strip())
        elif char in "]}":
            depth = max(depth - 1, 0)
        i += 1
    for table in tables:
        if table["deep"] is not None:
            line, key = table["deep"]
            return Deep(line, key, table=table["header"], name=table["name"])
    return None


def _string_end(text: str, start: int, quote: str) -> int:
    """The index just past the string that opened with `quote` before `start`."""
    i = start
    while i < len(text):
        if quote[0] == '"' and text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            end = i + len(quote)
            while len(quote) == 3 and text.startswith(quote[0], end) and end - i < 5:
                end += 1  # """a"""" ends with the quote after up to two more
            return end
        if len(quote) == 1 and text[i] == "\n":
            return i  # an unterminated one-line string: tomllib says so
        i += 1
    return len(text)
