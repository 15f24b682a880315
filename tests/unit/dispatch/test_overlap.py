"""Overlap policies: what a fire does while an earlier run of the same job is still going,
as planned (dispatch.plan.plan_overlap)."""

import pytest

from scheduler_app import dispatch
from tests.conftest import utc

T0, T1, T2 = utc(2024, 1, 1, 0, 0, 0), utc(2024, 1, 1, 0, 0, 10), utc(2024, 1, 1, 0, 0, 20)


@pytest.mark.parametrize(
    ("policy", "active", "queue", "pend", "skip", "cancel"),
    [
        ("allow", [(1, "running", "")], [T0, T1], [], [], []),
        ("skip", [], [T0], [], [(T1, "overlap_skip")], []),
        ("skip", [(1, "running", "")], [], [], [(T0, "overlap_skip"), (T1, "overlap_skip")], []),
        ("buffer_one", [(1, "queued", "")], [], [T0], [(T1, "overlap_buffer_full")], []),
        (
            "buffer_one",
            [(1, "running", ""), (2, "pending", "")],
            [],
            [],
            [(T0, "overlap_buffer_full"), (T1, "overlap_buffer_full")],
            [],
        ),
        ("buffer_one", [], [T0], [T1], [], []),
        ("replace", [(1, "running", ""), (2, "pending", "")], [T1], [], [(T0, "overlap_replaced")], [1, 2]),
        ("replace", [], [T1], [], [(T0, "overlap_replaced")], []),
    ],
)
def test_plan_overlap(policy, active, queue, pend, skip, cancel):
    plan = dispatch.plan.plan_overlap(policy, [T0, T1], active)

    assert plan.queue == queue
    assert [at for at, _ in plan.pend] == pend
    assert [(at, reason.split(":")[0]) for at, reason in plan.skip] == skip
    assert sorted(plan.cancel) == cancel
