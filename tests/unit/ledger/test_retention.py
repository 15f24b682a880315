"""Retention's policy, pure: the days kept, each field taken from the most specific level, and
the units a walk goes through (pruning against the real PostgreSQL:
tests/integration/ledger/test_retention.py)."""

from __future__ import annotations

import pytest

from scheduler_app.ledger import policy as retention_policy
from scheduler_app.ledger import retention


@pytest.fixture(autouse=True)
def policy(settings):
    """The settings' policy in these tests: 30 days, failed and dead 90, no floor."""
    settings.CRONFLEET_RETENTION_DAYS = 30
    settings.CRONFLEET_RETENTION_FAILED_DAYS = 90
    settings.CRONFLEET_RETENTION_KEEP_LAST = 0
    settings.CRONFLEET_RETENTION_AUDIT_DAYS = 365
    return settings


# --- the policy (pure) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "failed", "expected"),
    [
        (retention_policy.Policy(30, 90, 0), False, 30),
        (retention_policy.Policy(30, 90, 0), True, 90),
        (retention_policy.Policy(30, 10, 0), True, 30),  # failed and dead runs are never kept for less
        (retention_policy.Policy(0, 90, 0), True, None),  # days 0: everything kept forever
        (retention_policy.Policy(30, 0, 0), True, None),  # failed days 0: failed runs kept forever
        (retention_policy.Policy(30, 0, 0), False, 30),
    ],
)
def test_kept_days(policy, failed, expected):
    assert policy.kept_days(failed=failed) == expected


def test_resolve_takes_each_field_from_the_most_specific_level(settings):
    policy, sources = retention_policy.resolve(
        ("job", {"retention_days": 3, "retention_failed_days": None, "retention_keep_last": None}),
        ("tenant", {"retention_days": 7, "retention_failed_days": 14, "retention_keep_last": None}),
    )

    assert policy == retention_policy.Policy(days=3, failed_days=14, keep_last=0)
    assert sources == {"retention_days": "job", "retention_failed_days": "tenant", "retention_keep_last": "settings"}


def test_units_for_walks_each_tenant_and_each_job_with_its_own_rules_in_two_classes():
    blank = dict.fromkeys(retention_policy.FIELDS)
    tenants = [(1, blank), (2, {**blank, "retention_days": 0})]  # tenant 2 keeps everything

    units = retention.units_for(tenants, [(10, 2, {**blank, "retention_days": 5})], dict(tenants))

    assert [(u.kind, u.key, u.failed, u.days, u.own_rules) for u in units] == [
        ("tenant", 1, False, 30, False),
        ("tenant", 1, True, 90, False),
        ("job", 10, False, 5, False),
        ("job", 10, True, 90, False),
    ]
