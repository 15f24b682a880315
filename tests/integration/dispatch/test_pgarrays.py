"""Array literals for the beat's statements, read back by the real PostgreSQL."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection

from scheduler_app.dispatch import pgarrays

pytestmark = pytest.mark.django_db


def read_back(literal: str, cast: str):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT %s::{cast}", [literal])
        return cursor.fetchone()[0]


def test_integers_read_back_as_they_were():
    assert read_back(pgarrays.integers([1, 0, -5, 2**62]), "bigint[]") == [1, 0, -5, 2**62]
    assert read_back(pgarrays.integers([]), "bigint[]") == []


def test_times_keep_their_instant_and_none_is_null():
    instants = [
        datetime(2026, 12, 1, 7, 44, 45, 123456, tzinfo=UTC),
        datetime(2026, 3, 29, 2, 30, tzinfo=timezone(timedelta(hours=2))),
        None,
    ]
    assert read_back(pgarrays.times(instants), "timestamptz[]") == instants


def test_texts_keep_commas_braces_quotes_backslashes_and_the_word_null():
    values = ["queued", "", "a,b", "{x}", 'say "hi"', "back\\slash", "NULL", "überall 🙂", " padded "]
    assert read_back(pgarrays.texts(values), "varchar[]") == values
