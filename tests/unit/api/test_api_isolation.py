"""Tenant isolation, the walk itself: a route parameter the walk (tests/support/api_walk.py) cannot
fill fails, naming the route. The walk as tenant B over tenant A's objects is
tests/integration/api/test_api_isolation.py.
"""

from __future__ import annotations

import pytest

from tests.support.api_walk import fill


def test_the_walk_fails_on_a_route_parameter_it_cannot_fill():
    with pytest.raises(AssertionError, match=r"does not know how to fill \{run_id\}"):
        fill("jobs/{run_id}/", {})
