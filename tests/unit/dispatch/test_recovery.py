"""Recovery's failpoints (observability.failpoints): unknown names and actions are refused."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from scheduler_app.observability import failpoints


def test_failpoints_refuse_unknown_names_and_actions():
    with pytest.raises(ImproperlyConfigured, match="unknown failpoint"):
        failpoints._parse("beat.nowhere=kill")
    with pytest.raises(ImproperlyConfigured, match="unknown action"):
        failpoints._parse("beat.after_commit=explode")
    assert failpoints._parse("beat.after_commit=kill@3, worker.before_target=sleep:0.5") == {
        "beat.after_commit": ("kill", 3),
        "worker.before_target": ("sleep:0.5", 1),
    }
