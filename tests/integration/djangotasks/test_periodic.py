"""Periodic django.tasks tasks declared in code (@periodic) go through schedules as code:
plan shows them under the owner code:<module>, apply makes them, drift is reported, and a
declaration taken away is paused as plan says."""

from __future__ import annotations

import copy
import importlib

import pytest

from scheduler_app import services, taskapi
from scheduler_app.models import Job, Tenant
from scheduler_app.services import declared

if taskapi.api is None:
    pytest.skip("neither django.tasks nor the django-tasks backport is installed", allow_module_level=True)

MODULE = "tests.support.djperiodic"
OWNER = f"code:{MODULE}"


@pytest.fixture
def tenant(db) -> Tenant:
    """The backend's tenant, with the periodic declarations of tests/support/djperiodic.py
    registered for this test only."""
    saved = [copy.deepcopy(registry) for registry in (taskapi._bound, taskapi._periodic, taskapi._modules)]
    importlib.reload(importlib.import_module(MODULE))
    yield Tenant.objects.create(slug="djtasks", name="django.tasks")
    for registry, before in zip((taskapi._bound, taskapi._periodic, taskapi._modules), saved):
        registry.clear()
        registry.update(before)


def plan(**options) -> declared.Plan:
    return declared.make_plan(declared.read_all(), owner=OWNER, **options)


def test_apply_makes_the_declared_periodic_tasks_jobs_of_their_module(tenant):
    first = plan()

    assert first.owners == [OWNER]
    assert sorted(step.label for step in first.of("create")) == [
        "djtasks/minutely-sum",
        "djtasks/tests.support.djperiodic.nightly",
    ]
    declared.apply_plan(declared.read_all(), owner=OWNER)
    nightly = Job.objects.get(tenant=tenant, name="tests.support.djperiodic.nightly")
    assert (nightly.task_name, nightly.cron, nightly.timezone) == (
        "django:tests.support.djperiodic.nightly",
        "0 3 * * *",
        "Europe/Paris",
    )
    assert (nightly.max_attempts, nightly.managed_by) == (5, OWNER)
    summed = Job.objects.get(tenant=tenant, name="minutely-sum")
    assert (summed.every_seconds, summed.args, summed.max_attempts) == (60, [1, 2], 2)
    assert plan().to_do == []


def test_an_edit_outside_the_declaration_is_drift(tenant):
    declared.apply_plan(declared.read_all(), owner=OWNER)
    nightly = Job.objects.get(tenant=tenant, name="tests.support.djperiodic.nightly")

    services.job_update(nightly, {"max_attempts": 9}, actor="admin:alice")

    (step,) = plan().drifted
    assert step.label == "djtasks/tests.support.djperiodic.nightly"
    assert step.drift == ["max_attempts"]


def test_a_declaration_taken_away_is_paused_by_apply(tenant, monkeypatch):
    declared.apply_plan(declared.read_all(), owner=OWNER)
    kept = {name: table for name, table in taskapi._periodic[MODULE].items() if name == "minutely-sum"}
    monkeypatch.setitem(taskapi._periodic, MODULE, kept)

    (step,) = plan().of("remove")
    assert step.label == "djtasks/tests.support.djperiodic.nightly"
    declared.apply_plan(declared.read_all(), owner=OWNER)

    nightly = Job.objects.get(tenant=tenant, name="tests.support.djperiodic.nightly")
    assert not nightly.enabled
    assert Job.objects.get(tenant=tenant, name="minutely-sum").enabled


def test_a_module_with_no_declaration_left_still_prunes_its_jobs(tenant, monkeypatch):
    declared.apply_plan(declared.read_all(), owner=OWNER)
    monkeypatch.setitem(taskapi._periodic, MODULE, {})

    assert len(plan().of("remove")) == 2
