"""Checks of what people write: text fields and tags.

Pure functions: each returns the value as it is to be stored, or raises InvalidInput
naming the field. The services call them before anything is written, so the API, the
admin and the CLI refuse the same things. No database, no clock, no Django.
"""

from __future__ import annotations

import unicodedata


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
