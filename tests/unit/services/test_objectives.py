"""An objective's fields checked (services.objectives): pure, no database."""

from __future__ import annotations

import pytest

from scheduler_app.services.objectives import check_objective_fields, check_target
from scheduler_app.validation import InvalidInput


@pytest.mark.parametrize(
    ("given", "stored"),
    [("99%", 0.99), ("99.5 %", 0.995), ("99.5", 0.995), ("0.995", 0.995), (0.9, 0.9), (99.999, 0.99999)],
)
def test_a_target_is_a_percentage_or_a_fraction(given, stored):
    assert check_target(given) == stored


@pytest.mark.parametrize("given", ["", "nines", "0", "0%", "100%", "1", "101", "-5%", "nan", "inf", "99.9999%"])
def test_a_target_outside_the_promise_is_refused_naming_target(given):
    with pytest.raises(InvalidInput) as refused:
        check_target(given)

    assert refused.value.field == "target"


def test_a_start_objective_needs_its_threshold_and_only_it_has_one():
    with pytest.raises(InvalidInput) as missing:
        check_objective_fields({"kind": "start", "target": "99%"})
    with pytest.raises(InvalidInput) as extra:
        check_objective_fields({"kind": "success", "target": "99%", "threshold_seconds": 60})

    assert missing.value.field == extra.value.field == "threshold_seconds"
    assert check_objective_fields({"kind": "start", "target": "99%", "threshold_seconds": 60}) == {
        "kind": "start",
        "tag": "",
        "target": 0.99,
        "window_days": 28,
        "threshold_seconds": 60,
    }


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "uptime", "target": "99%"}, "kind"),
        ({"kind": "success", "target": "99%", "window_days": 0}, "window_days"),
        ({"kind": "success", "target": "99%", "window_days": 91}, "window_days"),
        ({"kind": "success", "target": "99%", "window_days": True}, "window_days"),
        ({"kind": "start", "target": "99%", "threshold_seconds": 0}, "threshold_seconds"),
        ({"kind": "success", "target": "99%", "tag": "a\u202eb"}, "tag"),
        ({"kind": "success", "target": "99%", "owner": "x"}, "owner"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(fields, field):
    with pytest.raises(InvalidInput) as refused:
        check_objective_fields(fields)

    assert refused.value.field == field
