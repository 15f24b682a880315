"""Worker side, the pure parts: the retry delay and the truncation of results (no database)."""

import random

import pytest

from scheduler_app.worker import execution


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 10), (2, 20), (3, 40), (4, 80), (10, 300)],  # base 10 s, doubling, capped at 300 s
)
def test_retry_delay_doubles_and_is_capped(attempt, expected):
    delay = execution.retry_delay(attempt, base=10, cap=300, rng=random.Random(1))

    assert expected * 0.9 <= delay.total_seconds() <= expected * 1.1


def test_results_are_truncated_to_the_configured_size(settings):
    settings.CRONFLEET_RESULT_MAX_BYTES = 300

    text = execution.truncate("é" * 1000)

    assert len(text.encode()) <= 300 and text.endswith("[2000 bytes]")
