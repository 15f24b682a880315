"""Fleet objectives in the admin (scheduler_app/admin/objectives.py): declared through the
services (a bad target named), listed with their attainment and budget left, read-only once
declared; and the dashboard's objectives panel, shown to staff with view_objective only."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduler_app import services
from scheduler_app.ledger.objectives import floor_hour
from scheduler_app.models import AuditEvent, Objective, ObjectiveHour, db_now
from scheduler_app.services.objectives import objective_create
from tests.integration.admin.test_admin_permissions import DASHBOARD_VIEWS, login

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme(db):
    return services.tenant_create(slug="acme", name="Acme")


def spent_half(objective: Objective) -> None:
    """10 bad events of 2000 in the last hour: half of a 99 % budget."""
    ObjectiveHour.objects.create(objective=objective, hour=floor_hour(db_now()), good=1990, total=2000)


def test_an_objective_is_declared_in_the_admin_and_listed_with_its_budget(admin_client, acme):
    response = admin_client.post(
        reverse("admin:scheduler_app_objective_add"),
        {
            "tenant": acme.pk,
            "name": "fires",
            "kind": "start",
            "threshold_seconds": "60",
            "target": "99%",
            "window_days": "28",
            "tag": "",
        },
    )

    assert response.status_code == 302, response.content.decode()
    objective = Objective.objects.get()
    assert (objective.kind, objective.threshold_seconds, objective.target) == ("start", 60, 0.99)
    assert AuditEvent.objects.filter(action="objective.created", tenant=acme).exists()
    spent_half(objective)
    listing = admin_client.get(reverse("admin:scheduler_app_objective_changelist")).content.decode()
    assert "99% of fires start within 60 s over 28 days" in listing
    assert "99.50% (1990/2000)" in listing and "50.00%" in listing


def test_the_admin_names_the_field_of_a_bad_objective(admin_client, acme):
    response = admin_client.post(
        reverse("admin:scheduler_app_objective_add"),
        {"tenant": acme.pk, "name": "fires", "kind": "start", "target": "150%", "window_days": "28"},
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "target" in errors
    assert not Objective.objects.exists()


def test_the_dashboard_shows_each_objective_s_attainment_and_budget_left(admin_client, acme):
    spent_half(objective_create(acme, name="runs", kind="success", target="99%"))

    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()

    assert 'id="cf-objectives"' in html
    assert "acme/runs" in html and "99% of runs succeed over 28 days" in html
    assert "99.50%" in html and 'value="0.5"' in html  # the budget's meter, half left


def test_the_objectives_panel_needs_view_objective(client, acme):
    objective_create(acme, name="runs", kind="success", target="99%")
    login(client, *DASHBOARD_VIEWS)

    without = client.get(reverse("cronfleet:dashboard")).content.decode()
    login(client, *DASHBOARD_VIEWS, "view_objective")
    with_it = client.get(reverse("cronfleet:dashboard")).content.decode()

    assert "needs the permission scheduler_app.view_objective" in without and "acme/runs" not in without
    assert "acme/runs" in with_it


def test_an_objective_s_page_is_read_only(admin_client, acme):
    objective = objective_create(acme, name="runs", kind="success", target="99%")
    url = reverse("admin:scheduler_app_objective_change", args=[objective.pk])

    page = admin_client.get(url)
    posted = admin_client.post(url, {"target": "50%"})

    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert posted.status_code == 403
    objective.refresh_from_db()
    assert objective.target == 0.99
