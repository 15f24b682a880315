"""Job priority (0-9, higher first), where no database is needed: a tenant's quota budget
spent by priority (dispatch.quotas.hold_over_budget), and the broker's priority of a message
per transport.
"""

import pytest

from scheduler_app import dispatch
from scheduler_app.dispatch.publish import broker_priority
from tests.conftest import utc

T = utc(2024, 1, 1, 0, 0, 0)


# --- the quota ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priorities", "available", "states"),
    [
        ([1, 9, 5], 1, ["pending", "queued", "pending"]),
        ([1, 9, 5], 2, ["pending", "queued", "queued"]),
        ([5, 5, 5], 1, ["queued", "pending", "pending"]),  # a tie: the older fire, then the lower job id
    ],
)
def test_hold_over_budget_spends_the_budget_by_priority(priorities, available, states):
    rows = [dispatch.plan.RunRow(job_id, 7, T, "queued", "", 1, priority) for job_id, priority in enumerate(priorities)]
    budgets = {7: dispatch.quotas.Budget(available=available, reason="quota_fires_per_minute: x")}

    planned = dispatch.quotas.hold_over_budget(rows, budgets)

    assert [r.state for r in planned] == states


# --- the broker ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("redis", [9, 5, 0]),  # kombu's Redis transport serves its lowest number first
        ("amqp", [0, 4, 9]),
        ("filesystem", [0, 4, 9]),
    ],
)
def test_broker_priority_per_transport(driver, expected):
    assert [broker_priority(p, driver) for p in (0, 4, 9)] == expected
