"""The test house's tiers (README: Run the tests): every test file stands in one, and each
tier's conftest refuses what the tier does not allow (a database or a server in unit, a
process in unit and integration), so a test that starts a process can only be in system/ or
faults/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
TIERS = ("unit", "integration", "system", "faults")


def test_every_test_file_stands_in_a_tier():
    loose = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in TIERS
    ]
    assert loose == []


def test_the_tiers_that_refuse_processes_say_so_in_their_conftest():
    for tier in ("unit", "integration"):
        conftest = (TESTS / tier / "conftest.py").read_text()
        assert "subprocess.Popen" in conftest and "belongs in tests/system/" in conftest, tier


class _Item:
    """What the collection hook reads of a test item: its path and its markers."""

    def __init__(self, path: Path, *markers: str):
        self.path, self.markers = path, list(markers)

    def get_closest_marker(self, name):
        return name if name in self.markers else None

    def add_marker(self, marker):
        self.markers.append(marker.name)


def test_every_test_of_the_tiers_that_start_processes_is_slow():
    """-m "not slow" is the unit and integration tiers: tests/conftest.py marks the rest."""
    from tests.conftest import pytest_collection_modifyitems

    items = {tier: _Item(TESTS / tier / "room" / "test_x.py") for tier in TIERS}
    marked_already = _Item(TESTS / "system" / "test_y.py", "slow")
    pytest_collection_modifyitems(None, [*items.values(), marked_already])

    assert {tier: "slow" in item.markers for tier, item in items.items()} == {
        "unit": False,
        "integration": False,
        "system": True,
        "faults": True,
    }
    assert marked_already.markers == ["slow"]
