"""`manage.py status` names Cronfleet's version (the distribution itself is tested in
tests/system/deploy/test_package.py)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

import scheduler_app


@pytest.mark.django_db
def test_status_names_the_version():
    out = StringIO()
    call_command("status", stdout=out)
    assert out.getvalue().startswith(f"Cronfleet {scheduler_app.__version__} at ")
