"""The test house's tiers (README: Run the tests): every test file stands in one, and each
tier's conftest refuses what the tier does not allow (a database or a server in unit, a
process in unit and integration), so a test that starts a process can only be in system/ or
faults/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
TIERS = ("unit", "integration", "system", "faults")


def test_every_test_file_stands_in_a_tier():
    loose = [str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py")
             if path.relative_to(TESTS).parts[0] not in TIERS]
    assert loose == []


def test_the_tiers_that_refuse_processes_say_so_in_their_conftest():
    for tier in ("unit", "integration"):
        conftest = (TESTS / tier / "conftest.py").read_text()
        assert "subprocess.Popen" in conftest and "belongs in tests/system/" in conftest, tier
