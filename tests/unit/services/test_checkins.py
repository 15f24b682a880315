"""A ping key's one spelling (services.checkins.canonical_key): pure, no database."""

from __future__ import annotations

import uuid

import pytest

from scheduler_app.services.checkins import canonical_key

KEY = "8044e860-da2e-4275-92d7-77be6e48ca72"


def test_the_canonical_spelling_is_the_key():
    assert canonical_key(KEY) == KEY
    assert canonical_key(str(uuid.UUID(int=0))) == "00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize(
    "spelling",
    [
        KEY.upper(),
        KEY[:8] + KEY[8:].upper(),  # one digit group in upper case
        "{" + KEY + "}",
        "urn:uuid:" + KEY,
        KEY.replace("-", ""),  # no hyphens
        KEY.replace("-", "")[:4] + "-" + KEY.replace("-", "")[4:],  # one hyphen, moved
        "8044e860d-a2e-4275-92d7-77be6e48ca72",  # 36 characters, a hyphen moved by one
        "8044e860-da2e-4275-92d7-77be6e48ca7-2",  # the last hyphen moved: 37 characters
        f" {KEY}",
        f"{KEY}\n",
        "８044e860-da2e-4275-92d7-77be6e48ca72",  # a full-width digit: int(..., 16) reads it
        "",
        "not-a-uuid",
        KEY[:-1],
        "x" * 3900,
    ],
)
def test_every_other_spelling_is_no_key(spelling):
    assert canonical_key(spelling) is None


def test_every_other_spelling_parses_as_the_same_uuid_all_the_same():
    # What makes the one spelling necessary: uuid.UUID reads these as the same key.
    for spelling in (
        KEY.upper(),
        "{" + KEY + "}",
        "urn:uuid:" + KEY,
        KEY.replace("-", ""),
        "8044e860d-a2e-4275-92d7-77be6e48ca72",
    ):
        assert str(uuid.UUID(spelling)) == KEY
