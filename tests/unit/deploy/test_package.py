"""`manage.py cronfleet` names Cronfleet's version and the settings in effect (the
distribution itself is tested in tests/system/deploy/test_package.py)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

import scheduler_app


def test_cronfleet_version(capsys):
    with pytest.raises(SystemExit) as exited:
        call_command("cronfleet", "--version")
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"cronfleet {scheduler_app.__version__}\n"


def test_cronfleet_names_the_version_and_the_settings():
    out = StringIO()
    call_command("cronfleet", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"cronfleet {scheduler_app.__version__}"
    assert lines[1] == "settings: tests.settings"
