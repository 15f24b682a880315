"""`manage.py alerts`: the durations its options take ("26h", "90m", "1h30m", seconds)."""

from __future__ import annotations

import pytest

from scheduler_app.management.commands.alerts import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("26h", 93600),
        ("90m", 5400),
        ("45s", 45),
        ("1h30m", 5400),
        ("2d", 172800),
        ("3600", 3600),
        ("0.5", 0.5),
        ("1.5m", 90),
        (" 10S ", 10),
    ],
)
def test_durations(text, seconds):
    assert parse_duration("--max-lag", text, whole=False, nullable=True) == seconds
