"""The end of a pause as the commands read it: --until or --for, never both."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app.management.pausing import cli_actor, pause_end
from scheduler_app.validation import InvalidInput

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("until", "for_", "end"),
    [
        (None, None, None),
        (None, "30m", NOW + timedelta(minutes=30)),
        (None, "2h", NOW + timedelta(hours=2)),
        (None, "7d", NOW + timedelta(days=7)),
        ("2026-03-02T09:00:00+01:00", None, datetime(2026, 3, 2, 8, 0, tzinfo=UTC)),
    ],
)
def test_pause_end(until, for_, end):
    assert pause_end(until, for_, NOW) == end


@pytest.mark.parametrize(
    ("until", "for_", "field"),
    [("2026-03-02T09:00:00Z", "2h", "for"), (None, "2 hours", "for"), ("2026-03-02T09:00:00", None, "until")],
)
def test_pause_end_names_the_field_of_a_bad_value(until, for_, field):
    with pytest.raises(InvalidInput) as raised:
        pause_end(until, for_, NOW)

    assert raised.value.field == field


def test_cli_actor_names_the_person():
    assert cli_actor("ann") == "cli:ann"
    assert cli_actor(None).startswith("cli:")
