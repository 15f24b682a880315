"""Checks of what people write: text fields, tags, HTTP targets, instants.

Pure functions: each returns the value as it is to be stored, or raises InvalidInput
naming the field. The services call them before anything is written, so the API, the
admin and the CLI refuse the same things. No database, no clock, no Django.
"""

from __future__ import annotations

import math
import re
import unicodedata
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit, urlunsplit


class InvalidInput(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# Unicode's Bidi_Control characters: they reorder how the text around them is shown, so a
# name or a note can display as something it is not ("Trojan Source", CVE-2021-42574).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Never in a name or a tag: controls (C0, DEL, C1), format characters (the bidi controls,
# zero-width ones), surrogates, private use, unassigned code points, and the line and
# paragraph separators U+2028/U+2029 (a line break to anything that honours them).
NAME_REFUSED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Never in free text (a note, a description): controls, surrogates, U+2028/U+2029 and the
# bidi controls. Other format characters stay (emoji sequences need U+200D).
TEXT_REFUSED = frozenset({"Cc", "Cs", "Zl", "Zp"})
# What a multi-line text keeps of the controls.
LINE_BREAKS = frozenset("\t\n")


_UNNAMED = {"Cc": "(a control character)", "Cs": "(a surrogate)", "Co": "(private use)", "Cn": "(unassigned)"}


def describe(char: str) -> str:
    """'U+202E RIGHT-TO-LEFT OVERRIDE', 'U+0007 (a control character)'."""
    name = unicodedata.name(char, "") or _UNNAMED.get(unicodedata.category(char), "")
    return f"U+{ord(char):04X} {name}".rstrip()


def _refuse_hidden(field: str, text: str, refused: frozenset[str], allowed: frozenset[str] = frozenset()) -> None:
    for char in text:
        if char not in allowed and (unicodedata.category(char) in refused or char in BIDI_CONTROLS):
            raise InvalidInput(field, f"must not contain the character {describe(char)}")


def check_name(field: str, value: str, *, max_length: int = 200) -> str:
    """A display name or tag: 1..max_length characters on one line, none of NAME_REFUSED.
    Surrounding spaces are dropped."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, "must not be empty")
    value = value.strip()
    if len(value) > max_length:
        raise InvalidInput(field, f"must be at most {max_length} characters")
    _refuse_hidden(field, value, NAME_REFUSED)
    return value


def check_line(field: str, value: str) -> str:
    """One line of free text, possibly empty (a pause note): none of TEXT_REFUSED.
    Surrounding spaces are dropped."""
    if not isinstance(value, str):
        raise InvalidInput(field, "must be text")
    value = value.strip()
    _refuse_hidden(field, value, TEXT_REFUSED)
    return value


def check_text(field: str, value: str) -> str:
    """Multi-line free text (a description): tabs and line feeds allowed, CRLF stored as LF
    (a browser's textarea sends CRLF); otherwise none of TEXT_REFUSED."""
    if not isinstance(value, str):
        raise InvalidInput(field, "must be text")
    value = value.replace("\r\n", "\n")
    _refuse_hidden(field, value, TEXT_REFUSED, LINE_BREAKS)
    return value


MAX_TAGS = 20


def check_tags(tags) -> list[str]:
    """At most MAX_TAGS one-line names; repeats dropped, the first occurrence kept in place."""
    if tags is None:
        return []
    if not isinstance(tags, list) or len(tags) > MAX_TAGS:
        raise InvalidInput("tags", f"must be a list of at most {MAX_TAGS} tags")
    checked = [check_name(f"tags.{index}", tag, max_length=64) for index, tag in enumerate(tags)]
    return list(dict.fromkeys(checked))


# --- HTTP targets -----------------------------------------------------------------------
# What a worker would refuse to send, or a server to read, on every attempt is refused when
# the job is saved.

# RFC 9110 section 5.6.2: a header name is a token.
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Set by the HTTP client (httpclient.RESERVED_HEADERS) or by the signature (webhook-*).
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "user-agent", "accept-encoding"}
)
SIGNED_PREFIX = "webhook-"


def _header_value_char(char: str) -> bool:
    """Tab, space, visible ASCII and printable Latin-1 (U+00A0-U+00FF): what is sent as one
    byte each and is no control character (RFC 9110's field-vchar, minus the C1 controls)."""
    return char == "\t" or " " <= char <= "~" or "\xa0" <= char <= "\xff"


def check_headers(field: str, headers) -> dict[str, str]:
    """A target's extra headers: {name: value}, names RFC 9110 tokens, values printable Latin-1."""
    if not isinstance(headers, dict):
        raise InvalidInput(field, "must be an object of names to values")
    for name, value in headers.items():
        if not isinstance(name, str) or not name:
            raise InvalidInput(field, "a header name must not be empty")
        if not HEADER_NAME.fullmatch(name):
            raise InvalidInput(
                f"{field}.{name}",
                "is not a header name: use letters, digits and "
                "! # $ % & ' * + - . ^ _ ` | ~ (no spaces, colons or line breaks)",
            )
        if name.lower() in RESERVED_HEADERS or name.lower().startswith(SIGNED_PREFIX):
            raise InvalidInput(f"{field}.{name}", "is set by Cronfleet and cannot be overridden")
        if not isinstance(value, str):
            raise InvalidInput(f"{field}.{name}", "must be text")
        bad = next((char for char in value if not _header_value_char(char)), None)
        if bad in ("\r", "\n"):
            raise InvalidInput(f"{field}.{name}", "must not contain CR or LF")
        if bad is not None:
            raise InvalidInput(
                f"{field}.{name}",
                f"must be printable Latin-1 (tab, space, ASCII, U+00A0-U+00FF); {describe(bad)} is not",
            )
    return dict(headers)


_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check_url_path(field: str, url: str) -> str:
    """The part of a target URL after the host (path, query, fragment) must already be
    percent-encoded ASCII: it is sent as written, never re-encoded, so it is refused (with
    its encoded form suggested) rather than guessed at. Call after netguard.check_url."""
    parts = urlsplit(url)
    tail = urlunsplit(("", "", parts.path, parts.query, parts.fragment))
    if not tail.isascii():
        encoded = urlunsplit(
            (
                parts.scheme,
                parts.netloc,
                *(quote(part, safe="/?:@!$&'()*+,;=%~") for part in (parts.path, parts.query, parts.fragment)),
            )
        )
        raise InvalidInput(
            field, f"the path and query must be percent-encoded ASCII (they are sent as written); write {encoded}"
        )
    if _BAD_PERCENT.search(tail):
        raise InvalidInput(field, "a '%' must start a percent-encoded byte such as %20 (write %25 for '%' itself)")
    return url


# --- instants ---------------------------------------------------------------------------


def check_instant_text(field: str, text: str) -> str:
    """An instant written as text must be ASCII. Django's parse_datetime and strptime (the
    API's and the admin's parsers) read full-width digits (U+FF10-U+FF19) and every other
    script's decimal digits as 0-9, and datetime.fromisoformat some of them, so what a
    reviewer reads and what is stored could differ. Call before parsing."""
    for char in text:
        if not char.isascii():
            raise InvalidInput(field, f"must be written with ASCII characters, digits 0-9; {describe(char)} is not one")
    return text


def check_end_at(field: str, end_at: datetime | None, now: datetime) -> None:
    """A job's end must not have passed: nothing would ever fire. (Naive values are left to
    schedules.validate, which refuses them.)"""
    if end_at is not None and end_at.tzinfo is not None and end_at < now:
        raise InvalidInput(
            field, f"is in the past ({end_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z); a job that has ended never fires"
        )


# --- JSON values ------------------------------------------------------------------------
# How deep a JSON value may nest (the API's bodies, a declared job's fields): code that
# recurses through a value (json.dumps, the validators, a reader) runs out of stack far
# deeper, so it is refused well before that, here and in the API's parser alike.
MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_json(field: str, value, *, max_depth: int = MAX_DEPTH) -> None:
    """Refuse, naming the path (`kwargs.a.0`), what jsonb or a reader would choke on: nesting
    deeper than max_depth, NaN and infinities, NUL characters and lone surrogates in a
    string or a key. Iterative: a value nested thousands deep is refused like one nested
    33 deep, never with a RecursionError. A value at the top of `field` is at depth 1."""
    pending: list[tuple[tuple[str, ...], object]] = [((field,), value)]
    while pending:
        path, item = pending.pop()
        if len(path) > max_depth:
            raise InvalidInput(path[0], f"must not nest deeper than {max_depth} levels")
        if isinstance(item, str):
            _check_json_text(path, item, "text")
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(".".join(path), f"must be a finite number ({item} is not one)")
        elif isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str):
                    _check_json_text(path, key, "a key")
                pending.append(((*path, str(key)), inner))
        elif isinstance(item, (list, tuple)):
            pending.extend(((*path, str(index)), inner) for index, inner in enumerate(item))


def _check_json_text(path: tuple[str, ...], text: str, what: str) -> None:
    if "\x00" in text:
        raise InvalidInput(".".join(path), f"{what} must not contain NUL (\\u0000) characters")
    if _SURROGATE.search(text):
        raise InvalidInput(".".join(path), f"{what} must not contain lone surrogates (\\ud800-\\udfff)")
