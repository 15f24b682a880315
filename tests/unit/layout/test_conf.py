"""The app's settings (scheduler_app/conf.py): every name the code reads has a default, a
project that sets none gets them, and `manage.py check` names a setting that is wrong."""

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from scheduler_app import checks
from scheduler_app.conf import DEFAULTS, app_settings, problems

ROOT = Path(__file__).resolve().parents[3]


def test_every_setting_the_code_reads_has_a_default():
    read = set()
    for path in (ROOT / "scheduler_app").rglob("*.py"):
        if path.name != "conf.py":  # its docstrings show the accessor with placeholder names
            read |= set(re.findall(r"\bapp_settings\.([A-Z][A-Z0-9_]*)", path.read_text()))
    assert read, "the scan found no reads"
    assert sorted(read - set(DEFAULTS)) == []


def test_nothing_in_the_app_reads_a_cronfleet_setting_from_django_settings_directly():
    direct = []
    for path in (ROOT / "scheduler_app").rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(
                r"\bsettings\.CRONFLEET_|getattr\(settings, \"CRONFLEET_(?!SQL_DATABASE_ALIASES)", line
            ) and not line.lstrip().startswith("#"):
                direct.append(f"{path.relative_to(ROOT)}:{number}")
    # Docstrings may name the setting; code goes through app_settings.
    code = [
        place
        for place in direct
        if "targets/sql/__init__" not in place and "statements.py" not in place and "running.py" not in place
    ]
    assert code == []


def test_a_setting_the_project_leaves_out_reads_as_its_default():
    from django.conf import settings

    holder = settings._wrapped
    saved = holder.__dict__.pop("CRONFLEET_LEASE_SECONDS", None)
    app_settings.forget()  # behind Django's back: no setting_changed says so
    try:
        assert not hasattr(settings, "CRONFLEET_LEASE_SECONDS")
        assert app_settings.LEASE_SECONDS == DEFAULTS["LEASE_SECONDS"] == 30
    finally:
        if saved is not None:
            holder.CRONFLEET_LEASE_SECONDS = saved
        app_settings.forget()


def test_an_override_is_read_at_once_and_derived_defaults_follow_it():
    with override_settings(CRONFLEET_HTTP_IN_FLIGHT=40):
        assert app_settings.HTTP_IN_FLIGHT == 40
        from django.conf import settings

        if not hasattr(settings, "CRONFLEET_HTTP_IN_FLIGHT_PER_HOST"):
            assert app_settings.HTTP_IN_FLIGHT_PER_HOST == 20


def test_a_value_kept_once_read_gives_way_to_an_override_and_comes_back_after_it():
    before = app_settings.HEARTBEAT_SECONDS
    assert app_settings.HEARTBEAT_SECONDS == before  # kept: read from the accessor's own attribute
    with override_settings(CRONFLEET_HEARTBEAT_SECONDS=before + 1):
        assert app_settings.HEARTBEAT_SECONDS == before + 1
    assert app_settings.HEARTBEAT_SECONDS == before


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="CRONFLEET_NO_SUCH_THING is not a Cronfleet setting"):
        app_settings.NO_SUCH_THING  # noqa: B018


def values(**changes):
    base = {name: getattr(app_settings, name) for name in DEFAULTS}
    base["VISIBILITY_TIMEOUT"] = None
    return base | changes


@pytest.mark.parametrize(
    ("changes", "setting", "says"),
    [
        ({"LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 6}, "CRONFLEET_HEARTBEAT_SECONDS", "at most half"),
        ({"RETENTION_DAYS": 30, "RETENTION_FAILED_DAYS": 7}, "CRONFLEET_RETENTION_FAILED_DAYS", "at least"),
        (
            {"VISIBILITY_TIMEOUT": 600, "MAX_JOB_TIMEOUT_SECONDS": 600},
            "CRONFLEET_MAX_JOB_TIMEOUT_SECONDS",
            "visibility timeout (600)",
        ),
        ({"RABBITMQ_QUEUE_TYPE": "stream"}, "CRONFLEET_RABBITMQ_QUEUE_TYPE", "one of classic, quorum"),
        ({"END_SYNCHRONOUS_COMMIT": "maybe"}, "CRONFLEET_END_SYNCHRONOUS_COMMIT", "one of on, off"),
        ({"RATE_LIMIT_REDIS_URL": "http://x"}, "CRONFLEET_RATE_LIMIT_REDIS_URL", "redis://"),
        ({"PING_UNKNOWN_PER_MINUTE": 0}, "CRONFLEET_PING_UNKNOWN_PER_MINUTE", "at least 1, got 0"),
        ({"PING_OWN_RUNS_PER_HOUR": -1}, "CRONFLEET_PING_OWN_RUNS_PER_HOUR", "at least 0, got -1"),
        ({"TENANT_DOCUMENT_KEY": "short"}, "CRONFLEET_TENANT_DOCUMENT_KEY", "at least 32 characters"),
    ],
)
def test_settings_at_odds_are_named_with_what_to_do(changes, setting, says):
    found = problems(values(**changes))
    assert [name for name, _ in found] == [setting]
    assert says in found[0][1]


def test_the_defaults_agree_with_each_other():
    assert problems(values()) == []


def test_the_system_check_names_a_setting_of_the_wrong_type():
    with override_settings(CRONFLEET_LEASE_SECONDS="30"):
        assert checks.setting_errors() == [("CRONFLEET_LEASE_SECONDS", "must be an int, got '30'")]
        with pytest.raises(SystemCheckError, match="CRONFLEET_LEASE_SECONDS must be an int"):
            call_command("check", tags=["cronfleet"])
    with override_settings(CRONFLEET_RETENTION_IN_BEAT=1):
        assert [name for name, _ in checks.setting_errors()] == ["CRONFLEET_RETENTION_IN_BEAT"]
    with override_settings(CRONFLEET_LEASE_SECONDS=True):
        assert [name for name, _ in checks.setting_errors()] == ["CRONFLEET_LEASE_SECONDS"]


def test_the_system_check_runs_the_cross_checks():
    with override_settings(CRONFLEET_LEASE_SECONDS=10, CRONFLEET_HEARTBEAT_SECONDS=6):
        with pytest.raises(SystemCheckError, match="CRONFLEET_HEARTBEAT_SECONDS must be at most half"):
            call_command("check", tags=["cronfleet"])
    call_command("check", tags=["cronfleet"])
