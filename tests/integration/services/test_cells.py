"""A cell's name in what it gives out (docs/scaling.md: Routing): API keys read
cf_<cell>_<prefix>_<secret> and ping URLs /ping/<cell>/<key> under CRONFLEET_CELL, both still
work after their tenant moves to another cell, and `cells routes` writes the proxy's
override maps for the tenants moved in (tests/system/deploy/test_cell_routing.py runs them through nginx)."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from scheduler_app import services
from scheduler_app.models import ApiKey, Job, JobRun, Monitor
from scheduler_app.services import cells

pytestmark = pytest.mark.django_db

KEY_TEXT = re.compile(r"cf_eu1_([0-9a-f]{12})_[A-Za-z0-9_-]{32}")


def monitored(tenant, name: str = "backup") -> Job:
    return services.job_create(
        tenant, services.JobSpec(name=name, target_kind="monitor", cron="* * * * *", monitor={"grace_seconds": 300})
    )


def me(raw: str):
    return Client().get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {raw}")


@override_settings(CRONFLEET_CELL="eu1")
def test_a_key_made_in_a_named_cell_carries_the_cell_and_authenticates():
    tenant = services.tenant_create(slug="acme", name="Acme")
    key, raw = services.apikey_create(tenant=tenant, name="ci")

    match = KEY_TEXT.fullmatch(raw)
    assert match is not None and match.group(1) == key.prefix
    assert ApiKey.objects.get(id=key.id).cell == "eu1"
    assert me(raw).status_code == 200 and me(raw).json()["tenant"]["slug"] == "acme"
    # The cell is part of the hashed text: a key made to name another cell is refused.
    assert me(raw.replace("cf_eu1_", "cf_us1_")).status_code == 401
    assert me(raw.replace("cf_eu1_", "cf_")).status_code == 401


def test_a_key_made_without_a_cell_keeps_the_old_form_and_still_works_once_cells_are_named():
    tenant = services.tenant_create(slug="acme", name="Acme")
    key, raw = services.apikey_create(tenant=tenant, name="ci")

    assert re.fullmatch(r"cf_[0-9a-f]{12}_[A-Za-z0-9_-]{32}", raw) and key.cell == ""
    with override_settings(CRONFLEET_CELL="eu1"):
        assert me(raw).status_code == 200


def test_a_ping_url_names_its_cell_and_both_forms_record_the_ping():
    tenant = services.tenant_create(slug="ops", name="Ops")
    with override_settings(CRONFLEET_CELL="eu1"):
        job = monitored(tenant)
    monitor = Monitor.objects.get(job=job)

    assert monitor.cell == "eu1"
    assert (
        services.ping_url(monitor, "https://cron.example.com")
        == f"https://cron.example.com/ping/eu1/{monitor.ping_key}"
    )
    assert Client().get(f"/ping/eu1/{monitor.ping_key}/start").status_code == 200
    assert Client().post(f"/ping/eu1/{monitor.ping_key}", data=b"done", content_type="text/plain").status_code == 200
    assert Client().get(f"/ping/{monitor.ping_key}/1").status_code == 200
    assert Client().get(f"/ping/eu1/{monitor.ping_key}/nonsense").status_code == 404
    assert Client().get("/ping/eu1/not-a-key").status_code == 404
    assert list(JobRun.objects.filter(job=job).order_by("id").values_list("state", flat=True)) == [
        "succeeded",
        "failed",
    ]


def test_cells_routes_lists_the_keys_and_ping_keys_of_active_tenants_that_name_another_cell(tmp_path):
    with override_settings(CRONFLEET_CELL="eu1"):
        here = services.tenant_create(slug="here", name="Here")
        services.apikey_create(tenant=here, name="ci")
        monitored(here)
    with override_settings(CRONFLEET_CELL="us1"):
        moved = services.tenant_create(slug="moved", name="Moved")
        moved_key, _ = services.apikey_create(tenant=moved, name="ci")
        revoked, _ = services.apikey_create(tenant=moved, name="old")
        services.apikey_revoke(revoked)
        moved_ping = Monitor.objects.get(job=monitored(moved)).ping_key
        gone = services.tenant_create(slug="gone", name="Gone")
        services.apikey_create(tenant=gone, name="ci")
        services.tenant_update(gone, {"is_active": False})
    out = StringIO()

    with override_settings(CRONFLEET_CELL="eu1"):
        call_command("cells", "routes", "--out", str(tmp_path), stdout=out)

    def entries(name: str) -> list[str]:
        return [line for line in (tmp_path / name).read_text().splitlines() if not line.startswith("#")]

    assert entries("eu1.keys.map") == [f"{moved_key.prefix} eu1;"]
    assert entries("eu1.pings.map") == [f"{moved_ping} eu1;"]
    assert "1 API keys" in out.getvalue() and "1 ping keys" in out.getvalue()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eu1.keys.map", "eu1.pings.map"]  # no temporary left


def test_cells_commands_name_the_missing_setting_and_a_missing_directory(tmp_path):
    with pytest.raises(Exception, match="CRONFLEET_CELL: is not set"):
        call_command("cells", "directory")
    with override_settings(CRONFLEET_CELL="eu1"), pytest.raises(Exception, match="out: .* is not a directory"):
        call_command("cells", "routes", "--out", str(tmp_path / "missing"))


@override_settings(CRONFLEET_CELL="eu1")
def test_cells_directory_lists_this_cells_tenants():
    services.tenant_create(slug="acme", name="Acme")
    services.tenant_update(services.tenant_create(slug="left", name="Left"), {"is_active": False})
    out = StringIO()

    call_command("cells", "directory", stdout=out)

    rows = [line.split() for line in out.getvalue().splitlines()[2:]]
    assert rows == [["acme", "eu1", "yes"], ["left", "eu1", "no"]]
    assert cells.directory_rows() == [("acme", "eu1", True), ("left", "eu1", False)]


@override_settings(CRONFLEET_CELL="eu1")
def test_the_api_and_the_admin_show_the_cell_a_key_names(admin_client):
    tenant = services.tenant_create(slug="acme", name="Acme")
    key, raw = services.apikey_create(tenant=tenant, name="ci")

    listed = Client().get("/api/v1/keys/", HTTP_AUTHORIZATION=f"Bearer {raw}").json()
    page = admin_client.get(f"/admin/scheduler_app/apikey/{key.id}/change/").content.decode()

    assert [(row["prefix"], row["cell"]) for row in listed["results"]] == [(key.prefix, "eu1")]
    assert re.search(r"Cell:</label>\s*<div class=\"readonly\">eu1</div>", page)
