"""Per-tenant dispatch quotas, the pure part: the budget of fires per minute and concurrent
runs a tenant has left (dispatch.quotas.budget_of), the plan that holds fires over it as
`pending` with a reason starting with "quota_", oldest first, and a run's times by state.
"""

from datetime import timedelta

import pytest

from scheduler_app import dispatch
from scheduler_app.models import PRIORITY_DEFAULT
from tests.conftest import utc

T = utc(2024, 1, 1, 0, 0, 0)
FIRES = "quota_fires_per_minute: waiting for room under the tenant's limit of {} fires per minute"
CONCURRENCY = "quota_concurrency: waiting for room under the tenant's limit of {} concurrent runs"


# --- the budget and the plan: pure ----------------------------------------------------------


@pytest.mark.parametrize(
    ("max_fires", "max_concurrent", "fired", "in_flight", "available", "reason"),
    [
        (None, None, 0, 0, None, None),
        (5, None, 0, 0, 5, FIRES.format(5)),
        (5, None, 3, 40, 2, FIRES.format(5)),
        (5, None, 5, 0, 0, FIRES.format(5)),
        (5, None, 9, 0, 0, FIRES.format(5)),  # over (manual triggers, a quota lowered): never negative
        (None, 2, 50, 1, 1, CONCURRENCY.format(2)),
        (None, 2, 0, 2, 0, CONCURRENCY.format(2)),
        (10, 2, 3, 1, 1, CONCURRENCY.format(2)),  # the tighter limit binds and names the reason
        (10, 4, 8, 1, 2, FIRES.format(10)),
        (3, 3, 1, 1, 2, FIRES.format(3)),  # a tie names fires per minute
    ],
)
def test_budget_of(max_fires, max_concurrent, fired, in_flight, available, reason):
    budget = dispatch.quotas.budget_of(max_fires, max_concurrent, fired=fired, in_flight=in_flight)

    if available is None:
        assert budget is None
    else:
        assert (budget.available, budget.reason, budget.for_new_runs) == (available, reason, available)


def test_a_budget_with_runs_already_waiting_leaves_nothing_for_new_runs():
    budget = dispatch.quotas.budget_of(5, None, fired=0, in_flight=0, holding=True)

    assert (budget.available, budget.for_new_runs) == (5, 0)  # the release sweep spends it, oldest first


def row(job_id, tenant_id, at, state="queued", reason=""):
    return dispatch.plan.RunRow(job_id, tenant_id, at, state, reason, 1, PRIORITY_DEFAULT)


T1, T2, T3 = T + timedelta(seconds=1), T + timedelta(seconds=2), T + timedelta(seconds=3)


@pytest.mark.parametrize(
    ("rows", "available", "states"),
    [
        # the oldest fires get the budget, whatever the order they were planned in
        ([row(1, 7, T3), row(2, 7, T1), row(3, 7, T2)], 2, ["held", "queued", "queued"]),
        ([row(1, 7, T1), row(2, 7, T1), row(3, 7, T1)], 1, ["queued", "held", "held"]),  # same instant: job id
        ([row(1, 7, T1), row(2, 7, T2)], 0, ["held", "held"]),
        ([row(1, 7, T1), row(2, 7, T2)], 5, ["queued", "queued"]),
        # other tenants, skipped and overlap-held rows are not the quota's business
        ([row(1, 8, T1), row(2, 8, T2), row(3, 7, T1)], 0, ["queued", "queued", "held"]),
        (
            [row(1, 7, T1, "skipped", "coalesced"), row(2, 7, T2, "pending", "overlap_buffered: x"), row(3, 7, T3)],
            0,
            ["skipped", "pending", "held"],
        ),
    ],
)
def test_hold_over_budget(rows, available, states):
    budgets = {7: dispatch.quotas.Budget(available=available, reason=FIRES.format(5))}

    planned = dispatch.quotas.hold_over_budget(rows, budgets)

    def label(r):
        return "held" if r.reason.startswith("quota_") else r.state

    assert [label(r) for r in planned] == states
    for r in planned:
        if label(r) == "held":
            assert (r.state, r.reason) == ("pending", FIRES.format(5))
            assert dispatch.run_times(r.state, T) == (T, None, None, None)  # not sent: no dispatched_at


@pytest.mark.parametrize(
    ("state", "times"),
    [
        ("queued", (T, T, T, None)),  # sent to the broker now: its first dispatch
        ("pending", (T, None, None, None)),
        ("skipped", (T, None, None, T)),
    ],
)
def test_a_runs_times_follow_from_its_state(state, times):
    assert dispatch.run_times(state, T) == times


def test_hold_over_budget_leaves_tenants_without_a_quota_alone():
    rows = [row(1, 7, T1), row(2, 8, T2)]

    assert dispatch.quotas.hold_over_budget(rows, {}) == rows
