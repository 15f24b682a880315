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


def check_name(field: str, value: str, *, max_length: int = 200) -> str:
    """A display name: 1..max_length characters, no control or bidi-override characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, "must not be empty")
    value = value.strip()
    if len(value) > max_length:
        raise InvalidInput(field, f"must be at most {max_length} characters")
    for char in value:
        if unicodedata.category(char) in {"Cc", "Cf", "Cs", "Co", "Cn"}:
            raise InvalidInput(field, f"must not contain the character U+{ord(char):04X}")
    return value


MAX_TAGS = 20


def check_tags(tags) -> list[str]:
    if tags is None:
        return []
    if not isinstance(tags, list) or len(tags) > MAX_TAGS:
        raise InvalidInput("tags", f"must be a list of at most {MAX_TAGS} tags")
    return [check_name(f"tags.{index}", tag, max_length=64) for index, tag in enumerate(tags)]
