"""`manage.py bootstrap_admin`: the first superuser made once from the environment, and an
incomplete environment refused (the compose service that runs it: tests/unit/deploy/test_deploy.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

# --- manage.py bootstrap_admin ----------------------------------------------------------------


def test_bootstrap_admin_makes_the_first_superuser_from_the_environment_and_then_nothing(db, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "root")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a long passphrase 7")

    call_command("bootstrap_admin")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "another long passphrase 8")
    call_command("bootstrap_admin")

    [admin] = User.objects.all()
    assert admin.is_superuser and admin.is_staff and admin.check_password("a long passphrase 7")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DJANGO_SUPERUSER_USERNAME": "root"}, "DJANGO_SUPERUSER_PASSWORD is not set"),
        ({"DJANGO_SUPERUSER_PASSWORD": "a long passphrase 7"}, "DJANGO_SUPERUSER_USERNAME is not set"),
        ({"DJANGO_SUPERUSER_USERNAME": "root", "DJANGO_SUPERUSER_PASSWORD": "short"}, "This password is too short"),
    ],
)
def test_bootstrap_admin_refuses_an_incomplete_environment(db, monkeypatch, env, message):
    for name in ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(CommandError, match=message):
        call_command("bootstrap_admin")

    assert not User.objects.exists()
