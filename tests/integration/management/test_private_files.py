"""Files that hold secrets are owner-only from their first byte, whatever the umask: the
proxy's maps of moved ping keys (`cells routes`) and a tenant's export document
(`tenants export`), whether the file is new or replaces one a wider mode left."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from django.core.management import call_command

from scheduler_app import services

pytestmark = pytest.mark.django_db


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def moved_monitor(settings) -> str:
    """A monitored job whose ping key names cell a, held in cell b (as after a move)."""
    settings.CRONFLEET_CELL = "a"
    tenant = services.tenant_create(slug="moved", name="Moved")
    job = services.job_create(
        tenant, services.JobSpec(name="backup", cron="0 3 * * *", target_kind="monitor", monitor={"grace_seconds": 60})
    )
    settings.CRONFLEET_CELL = "b"
    return str(job.monitor.ping_key)


@pytest.mark.parametrize("existing", [False, True], ids=["new", "replacing-0644"])
def test_cells_routes_writes_its_maps_owner_only(umask_022, settings, tmp_path, existing):
    ping_key = moved_monitor(settings)
    maps = [tmp_path / "b.keys.map", tmp_path / "b.pings.map"]
    if existing:
        for path in maps:
            path.write_text("# an older map\n")
            path.chmod(0o644)

    call_command("cells", "routes", "--out", str(tmp_path), stdout=io.StringIO())

    assert [mode_of(path) for path in maps] == [0o600, 0o600]
    assert f"{ping_key} b;" in maps[1].read_text()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["b.keys.map", "b.pings.map"]  # no temporary left


@pytest.mark.parametrize("existing", [False, True], ids=["new", "replacing-0644"])
def test_tenants_export_writes_its_document_owner_only(umask_022, tmp_path, existing):
    services.tenant_create(slug="moving", name="Moving")
    path = tmp_path / "moving.json"
    if existing:
        path.write_text("{}")
        path.chmod(0o644)

    call_command("tenants", "export", "moving", "--cut", "+600", "--file", str(path), stdout=io.StringIO())

    assert mode_of(path) == 0o600
    assert '"slug": "moving"' in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["moving.json"]
