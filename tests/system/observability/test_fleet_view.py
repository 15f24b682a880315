"""The fleet view across cells (issue 28, part 3): each cell's Prometheus names its cell in an
external label, and one Prometheus federates them as deploy/prometheus/fleet.yml says, so the
fleet dashboard (deploy/grafana/dashboards/cronfleet-fleet.json) shows the cells side by side.

Two cells, each a real beat on a database of its own (the test's, and one on a private
PostgreSQL cluster) with its metrics exporter; a Prometheus per cell scraping its beat; and the
fleet's Prometheus, run with fleet.yml's scrape config pointed at the two. What the fleet's
Prometheus answers must carry both cells, and every query of the fleet dashboard must run on it.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.conftest import ROOT, wait_for
from tests.support import servers
from tests.support.observing import free_ports
from tests.system.observability.test_monitoring import tool
from tests.system.observability.test_prometheus import Prometheus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
FLEET = ROOT / "deploy" / "prometheus" / "fleet.yml"
DASHBOARD = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "cronfleet-fleet.json").read_text())
DATABASE = "cronfleet"


def start_prometheus(processes, name: str, config: dict, port: int, tmp_path) -> Prometheus:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    check = subprocess.run([tool("promtool"), "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    processes.start(
        name,
        [
            tool("prometheus"),
            f"--config.file={path}",
            f"--storage.tsdb.path={tmp_path / name}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
    )
    prometheus = Prometheus(port)
    wait_for(prometheus.ready, timeout=60, what=f"{name} to be ready")
    return prometheus


def cell_config(cell: str, beat_port: int) -> dict:
    """A cell's Prometheus as deploy/prometheus/prometheus.yml has it, with the cell's label."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "external_labels": {"cell": cell}},
        "scrape_configs": [{"job_name": "cronfleet-beat", "static_configs": [{"targets": [f"127.0.0.1:{beat_port}"]}]}],
    }


def fleet_config(cell_ports: list[int]) -> dict:
    """deploy/prometheus/fleet.yml as written, its targets these cells' Prometheus, every second."""
    config = yaml.safe_load(FLEET.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    [job] = config["scrape_configs"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{port}" for port in cell_ports]}]
    return config


def test_the_fleet_prometheus_federates_both_cells_and_runs_every_fleet_dashboard_query(processes, tmp_path):
    if servers.postgres_bindir() is None:
        pytest.skip("needs PostgreSQL's initdb, pg_ctl and postgres (CRONFLEET_TEST_PG_BINDIR)")
    beat_a, beat_b, prom_a, prom_b, prom_fleet = free_ports(5)
    with servers.private_postgres() as cluster:
        cluster.create_database(DATABASE)
        processes.beat("beat-a", "--max-sleep", "1", "--metrics-port", str(beat_a), "--metrics-address", "127.0.0.1")
        with servers.database_on(cluster.host, cluster.port, DATABASE):
            beat = processes.beat(
                "beat-b", "--max-sleep", "1", "--metrics-port", str(beat_b), "--metrics-address", "127.0.0.1"
            )
        start_prometheus(processes, "prometheus-a", cell_config("a", beat_a), prom_a, tmp_path)
        start_prometheus(processes, "prometheus-b", cell_config("b", beat_b), prom_b, tmp_path)
        fleet = start_prometheus(processes, "prometheus-fleet", fleet_config([prom_a, prom_b]), prom_fleet, tmp_path)

        def cells_of(query: str) -> set[str]:
            return {
                series["metric"].get("cell", "") for series in fleet.get("/api/v1/query", query=query)["data"]["result"]
            }

        wait_for(
            lambda: cells_of("cronfleet_beat_turns_total") == {"a", "b"},
            timeout=90,
            interval=1,
            what="the fleet's Prometheus to hold both cells' beat turns",
        )
        wait_for(
            lambda: cells_of("rate(cronfleet_beat_turns_total[15s])") == {"a", "b"},
            timeout=60,
            interval=1,
            what="both cells' beats turning, as the fleet sees it",
        )
        for panel in DASHBOARD["panels"]:
            for target in panel["targets"]:
                answer = fleet.get("/api/v1/query", query=target["expr"].replace("$cell", ".*"))
                assert answer["status"] == "success", (panel["title"], answer)
        turns = next(panel for panel in DASHBOARD["panels"] if panel["title"] == "Beat turns per second by cell")
        wait_for(
            lambda: cells_of(turns["targets"][0]["expr"].replace("$cell", ".*")) == {"a", "b"},
            timeout=60,
            interval=1,
            what="the dashboard's beat-turns panel to show both cells",
        )
        assert cells_of(turns["targets"][0]["expr"].replace("$cell", "b")) == {"b"}  # the cell picker narrows it
        processes.stop(beat)  # before its database goes
