"""The ready-made monitoring: deploy/prometheus (scrape config and alert rules) and
deploy/grafana (a dashboard whose queries name only metrics Cronfleet exposes), and their
services in docker-compose.yml. promtool checking them, and the dashboard's queries parsing
as PromQL: tests/system/observability/test_monitoring.py."""

from __future__ import annotations

import json
import re

import yaml

from scheduler_app.observability import cluster, metrics
from tests.conftest import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = json.loads((GRAFANA / "dashboards" / "cronfleet.json").read_text())
ALERTS = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
OBJECTIVES = yaml.safe_load((PROMETHEUS / "objectives.yml").read_text())
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
METRIC = re.compile(r"\bcronfleet_[a-z_]+\b")
BURN_RATE = re.compile(r"\bcronfleet:objective_burn_rate:rate[0-9a-z]+\b")
KNOWN = metrics.names() | cluster.NAMES | {f"{name}_total" for name in cluster.COUNTERS}

FLEET_DASHBOARD = json.loads((GRAFANA / "dashboards" / "cronfleet-fleet.json").read_text())


def dashboard_queries() -> list[str]:
    """Every panel's query of both dashboards (the fleet one's $cell read as any cell)."""
    return [
        target["expr"].replace("$cell", ".*")
        for dashboard in (DASHBOARD, FLEET_DASHBOARD)
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def alert_queries() -> list[str]:
    return [rule["expr"] for rules in (ALERTS, OBJECTIVES) for group in rules["groups"] for rule in group["rules"]]


# --- names ------------------------------------------------------------------------------------


def test_the_dashboard_and_the_alerts_name_only_metrics_that_exist():
    named = {name for query in dashboard_queries() + alert_queries() for name in METRIC.findall(query)}

    assert named - KNOWN == set()
    # The client's four: job latency, success/failure rates, queue depth, worker throughput.
    assert {"cronfleet_start_lag_seconds_bucket", "cronfleet_runs_finished_total", "cronfleet_queue_depth"} <= named


def test_the_alerts_cover_what_an_operator_must_hear_about():
    names = {rule["alert"] for group in ALERTS["groups"] for rule in group["rules"]}

    assert names >= {
        "CronfleetNoLiveBeat",
        "CronfleetDispatchLagHigh",
        "CronfleetDueBacklogGrowing",
        "CronfleetFailureRateHigh",
        "CronfleetDeadRunsRising",
        "CronfleetNoLiveWorkerForQueue",
    }
    for group in ALERTS["groups"] + OBJECTIVES["groups"]:
        for rule in (rule for rule in group["rules"] if "alert" in rule):
            assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_objective_alerts_read_burn_rates_that_are_recorded():
    rules = [rule for group in OBJECTIVES["groups"] for rule in group["rules"]]
    recorded = {rule["record"] for rule in rules if "record" in rule}
    used = {name for rule in rules if "alert" in rule for name in BURN_RATE.findall(rule["expr"])}

    assert used <= recorded
    # The workbook's page: 1 hour and 5 minutes, 6 hours and 30 minutes.
    assert {f"cronfleet:objective_burn_rate:rate{window}" for window in ("5m", "30m", "1h", "6h")} <= used


def test_the_dashboard_reads_the_provisioned_data_source():
    [source] = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())["datasources"]

    uids = {panel["datasource"]["uid"] for panel in DASHBOARD["panels"]}
    uids |= {target["datasource"]["uid"] for panel in DASHBOARD["panels"] for target in panel["targets"]}
    assert uids == {source["uid"]} and source["url"] == "http://prometheus:9090"
    assert DASHBOARD["uid"] == "cronfleet" and len({panel["id"] for panel in DASHBOARD["panels"]}) == len(
        DASHBOARD["panels"]
    )


# --- docker-compose.yml ---------------------------------------------------------------------------


def test_compose_runs_prometheus_and_grafana_provisioned_from_deploy():
    services = COMPOSE["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]

    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert {
        "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro",
        "./deploy/grafana/dashboards:/etc/grafana/dashboards:ro",
    } <= set(grafana["volumes"])
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "cronfleet.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/etc/grafana/dashboards"
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
    for name in ("prometheus", "grafana"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
        assert all(port.startswith("127.0.0.1:") for port in services[name]["ports"]), name


def test_prometheus_scrapes_the_ports_the_beats_and_workers_serve():
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    services = COMPOSE["services"]

    def port_option(command: list[str]) -> int:
        return int(command[command.index("--metrics-port") + 1])

    assert jobs["cronfleet-web"]["static_configs"][0]["targets"] == ["web:8000"]
    assert jobs["cronfleet-beat"]["dns_sd_configs"][0] == {
        "names": ["beat"],
        "type": "A",
        "port": port_option(services["beat"]["command"]),
        "refresh_interval": "30s",
    }
    assert jobs["cronfleet-worker"]["dns_sd_configs"][0]["port"] == port_option(services["worker"]["command"])
    assert "web" in (ROOT / ".env.example").read_text().split("DJANGO_ALLOWED_HOSTS=")[1].splitlines()[0].split(",")


def test_prometheus_scrapes_the_web_with_the_token_compose_requires():
    web, prometheus = COMPOSE["services"]["web"], COMPOSE["services"]["prometheus"]
    job = {
        job["job_name"]: job for job in yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())["scrape_configs"]
    }["cronfleet-web"]

    # The web refuses to start under compose without a token, and Prometheus reads the same
    # value from the secret compose makes of it.
    assert web["environment"]["CRONFLEET_METRICS_TOKEN"].startswith("${CRONFLEET_METRICS_TOKEN:?")
    assert COMPOSE["secrets"]["metrics_token"] == {"environment": "CRONFLEET_METRICS_TOKEN"}
    assert "metrics_token" in prometheus["secrets"]
    assert job["authorization"] == {"credentials_file": "/run/secrets/metrics_token"}
    # Nothing but the web is published beyond loopback: no exporter, no Flower.
    for name, service in COMPOSE["services"].items():
        for port in service.get("ports", []):
            assert name == "web" or str(port).startswith("127.0.0.1:"), (name, port)
    for name in ("beat", "worker"):
        assert "ports" not in COMPOSE["services"][name], name
