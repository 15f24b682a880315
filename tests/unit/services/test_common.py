"""services.common.violates on SQLite (the embedded default), whose errors name a broken unique
rule by its columns only: PostgreSQL's, by the constraint's name, are in
tests/integration/services/test_services.py."""

from __future__ import annotations

import pytest
from django.db import IntegrityError

from scheduler_app.models import (
    CALENDAR_NAME_UNIQUE,
    WINDOW_NAME_UNIQUE,
    WINDOW_NAME_UNIQUE_DEPLOYMENT_WIDE,
    Calendar,
    MaintenanceWindow,
)
from scheduler_app.services.common import violates

WINDOW_RULES = (WINDOW_NAME_UNIQUE, WINDOW_NAME_UNIQUE_DEPLOYMENT_WIDE)


@pytest.mark.parametrize(
    "message",
    [
        "UNIQUE constraint failed: scheduler_app_maintenancewindow.tenant_id, scheduler_app_maintenancewindow.name",
        "UNIQUE constraint failed: scheduler_app_maintenancewindow.name",
    ],
    ids=["a tenant's", "the deployment's"],
)
def test_either_of_a_models_name_rules_is_recognised_by_its_columns(message):
    assert violates(IntegrityError(message), MaintenanceWindow, *WINDOW_RULES)


@pytest.mark.parametrize(
    "message",
    [
        "NOT NULL constraint failed: scheduler_app_maintenancewindow.name",
        "FOREIGN KEY constraint failed",
        "UNIQUE constraint failed: scheduler_app_calendar.tenant_id, scheduler_app_calendar.name",
    ],
    ids=["not null", "foreign key", "another table's"],
)
def test_another_rule_is_not_a_name_taken(message):
    assert not violates(IntegrityError(message), MaintenanceWindow, *WINDOW_RULES)


def test_only_the_rules_asked_about_count():
    taken = IntegrityError("UNIQUE constraint failed: scheduler_app_calendar.tenant_id, scheduler_app_calendar.name")
    assert violates(taken, Calendar, CALENDAR_NAME_UNIQUE)
    assert not violates(taken, Calendar)
