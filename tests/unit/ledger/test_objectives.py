"""An objective's window in numbers (ledger.objectives.Window) and a retried run's first start
(started_within): pure, no database."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app.ledger.objectives import Window, started_within
from tests.conftest import utc


@pytest.mark.parametrize(
    ("good", "total", "target", "attainment", "budget_left"),
    [
        (0, 0, 0.99, None, 1.0),  # no event: the budget is whole
        (100, 100, 0.99, 1.0, 1.0),
        (995, 1000, 0.99, 0.995, 0.5),  # 5 bad of the 10 allowed
        (990, 1000, 0.99, 0.99, 0.0),  # exactly spent
        (980, 1000, 0.99, 0.98, -1.0),  # spent twice over
        (0, 5, 0.99, 0.0, -99.0),
    ],
)
def test_the_attainment_and_the_budget_left(good, total, target, attainment, budget_left):
    window = Window(good, total, target)

    assert window.attainment == (pytest.approx(attainment) if attainment is not None else None)
    assert window.budget_left == pytest.approx(budget_left)


AT = utc(2024, 1, 1, 9, 0)


@pytest.mark.parametrize(
    ("attempts", "good"),
    [
        ([{"started_at": "2024-01-01T09:00:30+00:00"}], True),
        ([{"started_at": "2024-01-01T09:01:00.000001+00:00"}], False),
        ([{"started_at": "2024-01-01 09:00:59.5"}], True),  # SQLite's spelling: UTC, no offset
        ([{"started_at": None}], False),
        ([], False),
    ],
)
def test_a_retried_run_is_judged_by_its_first_start(attempts, good):
    assert started_within(AT, attempts, timedelta(seconds=60)) is good
