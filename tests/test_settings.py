"""Settings read from the environment fail loudly, naming the variable."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def check_settings(**env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", **env}
    return subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CRONFLEET_BATCH_SIZE": "many"}, "CRONFLEET_BATCH_SIZE must be an integer, got 'many'"),
        ({"CRONFLEET_BATCH_SIZE": "0"}, "CRONFLEET_BATCH_SIZE must be at least 1"),
        ({"DJANGO_DEBUG": "perhaps"}, "DJANGO_DEBUG must be a boolean"),
        ({"DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY must be set"),
        ({"CRONFLEET_LEASE_SECONDS": "10", "CRONFLEET_HEARTBEAT_SECONDS": "6"}, "CRONFLEET_HEARTBEAT_SECONDS must be"),
        ({"CELERY_BROKER_URL": "redis://127.0.0.1:6379/15", "CELERY_VISIBILITY_TIMEOUT": "600",
          "CRONFLEET_MAX_JOB_TIMEOUT_SECONDS": "600"}, "CELERY_VISIBILITY_TIMEOUT (600) must exceed"),
    ],
)
def test_bad_settings_stop_start_up_naming_the_variable(env, message):
    done = check_settings(**env)

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and message in done.stderr


def test_defaults_start_without_any_environment(tmp_path):
    done = check_settings(CRONFLEET_VAR_DIR=str(tmp_path), DATABASE_URL="", CELERY_BROKER_URL="")

    assert done.returncode == 0, done.stderr
