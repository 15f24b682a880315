"""Fleet objectives over the API (scheduler_app/api/objectives.py): a tenant key declares, reads
and removes its own tenant's, never another's and never a fleet-wide one; a staff key declares
the fleet's; bad input is refused naming the field."""

from __future__ import annotations

import pytest

from scheduler_app.ledger.objectives import floor_hour
from scheduler_app.models import Objective, ObjectiveHour, db_now
from scheduler_app.services.objectives import objective_create
from tests.integration.api.test_api import api, client_for, errors_of, make_tenant, tenant  # noqa: F401 (fixtures)

URL = "/api/v1/objectives/"


def test_a_tenant_declares_reads_and_removes_its_objectives(api, tenant):
    made = api.post(URL, {"name": "fires", "kind": "start", "threshold_seconds": 60, "target": "99%"}, format="json")
    objective = Objective.objects.get()
    ObjectiveHour.objects.create(objective=objective, hour=floor_hour(db_now()), good=995, total=1000)
    listed = api.get(URL)
    read = api.get(f"{URL}{objective.id}/")
    removed = api.delete(f"{URL}{objective.id}/")

    assert made.status_code == 201, made.json()
    assert made.json()["tenant"] == tenant.slug and made.json()["target"] == 0.99
    assert [found["name"] for found in listed.json()["results"]] == ["fires"]
    assert read.json()["window"] == {"good": 995, "total": 1000, "attainment": 0.995, "budget_left": pytest.approx(0.5)}
    assert removed.status_code == 204 and not Objective.objects.exists()


def test_another_tenant_s_objectives_and_the_fleet_s_are_not_there(api, tenant):
    other = objective_create(make_tenant(), name="theirs", kind="success", target="99%")
    fleet = objective_create(None, name="fleet", kind="success", target="99%")

    listed = api.get(URL)

    assert listed.json()["results"] == []
    for objective in (other, fleet):
        assert api.get(f"{URL}{objective.id}/").status_code == 404
        assert api.delete(f"{URL}{objective.id}/").status_code == 404
    refused = api.post(URL, {"name": "all", "kind": "success", "target": 0.99, "fleet": True}, format="json")
    assert refused.status_code == 403 and "fleet" in errors_of(refused)


def test_a_staff_key_declares_the_fleet_s_objectives(db):
    staff = client_for(None)

    made = staff.post(
        URL, {"name": "billing", "kind": "success", "tag": "billing", "target": 0.999, "fleet": True}, format="json"
    )
    unnamed = staff.post(URL, {"name": "x", "kind": "success", "target": 0.99}, format="json")

    assert made.status_code == 201 and made.json()["tenant"] is None and made.json()["tag"] == "billing"
    assert [found["name"] for found in staff.get(URL).json()["results"]] == ["billing"]
    assert unnamed.status_code == 400 and "X-Cronfleet-Tenant" in errors_of(unnamed)


def test_bad_input_is_refused_naming_the_field(api):
    for body, field in (
        ({"name": "x", "kind": "start", "target": "99%"}, "threshold_seconds"),
        ({"name": "x", "kind": "success", "target": "100%"}, "target"),
        ({"name": "x", "kind": "uptime", "target": 0.99}, "kind"),
        ({"name": "x", "kind": "success", "target": 0.99, "window_days": 365}, "window_days"),
    ):
        refused = api.post(URL, body, format="json")

        assert refused.status_code == 400 and field in errors_of(refused), (body, refused.json())
    assert not Objective.objects.exists()
