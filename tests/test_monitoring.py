"""The ready-made monitoring: deploy/prometheus (scrape config, alert rules and their unit
tests, checked by promtool) and deploy/grafana (a dashboard whose queries name only metrics
Cronfleet exposes and parse as PromQL), and their services in docker-compose.yml."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from scheduler_app.observability import cluster, metrics
from tests.conftest import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = json.loads((GRAFANA / "dashboards" / "cronfleet.json").read_text())
ALERTS = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
METRIC = re.compile(r"\bcronfleet_[a-z_]+\b")
KNOWN = metrics.names() | cluster.NAMES


def tool(name: str) -> str:
    """The path of Debian's prometheus tool `name`: the test skips without it, except in CI
    (.ci/run installs the package and sets CI), where its absence is a failure."""
    found = shutil.which(name)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not installed (.ci/run installs Debian's prometheus package)")
    pytest.skip(f"{name} is not installed: apt-get install prometheus (CI installs it)")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tool("promtool"), *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60)


FLEET_DASHBOARD = json.loads((GRAFANA / "dashboards" / "cronfleet-fleet.json").read_text())


def dashboard_queries() -> list[str]:
    """Every panel's query of both dashboards (the fleet one's $cell read as any cell)."""
    return [target["expr"].replace("$cell", ".*") for dashboard in (DASHBOARD, FLEET_DASHBOARD)
            for panel in dashboard["panels"] for target in panel.get("targets", [])]


def alert_queries() -> list[str]:
    return [rule["expr"] for group in ALERTS["groups"] for rule in group["rules"]]


# --- promtool ---------------------------------------------------------------------------------


def test_promtool_accepts_the_scrape_config_and_the_alert_rules(tmp_path):
    # The web job's token file is compose's secret, absent here: promtool checks a copy that
    # reads a token file of its own (and the rules beside it), everything else as written.
    scrape = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    (tmp_path / "token").write_text("a-token")
    for job in scrape["scrape_configs"]:
        if "authorization" in job:
            job["authorization"]["credentials_file"] = str(tmp_path / "token")
    scrape["rule_files"] = [str(PROMETHEUS / name) for name in scrape["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(scrape))

    config = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    rules = promtool("check", "rules", "alerts.yml")

    assert config.returncode == 0, config.stdout + config.stderr
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 10 rules found" in rules.stdout


def test_the_alerts_fire_on_the_series_they_are_about():
    done = promtool("test", "rules", "alerts_test.yml")

    assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_query_is_promql(tmp_path):
    # promtool parses expressions in rule files: the dashboard's, as recording rules.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{n}", "expr": expr} for n, expr in enumerate(dashboard_queries())]}]}
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))

    done = subprocess.run([tool("promtool"), "check", "rules", str(tmp_path / "dashboard.yml")], capture_output=True,
                          text=True, timeout=60)

    assert done.returncode == 0, done.stdout + done.stderr


# --- names ------------------------------------------------------------------------------------


def test_the_dashboard_and_the_alerts_name_only_metrics_that_exist():
    named = {name for query in dashboard_queries() + alert_queries() for name in METRIC.findall(query)}

    assert named - KNOWN == set()
    # The client's four: job latency, success/failure rates, queue depth, worker throughput.
    assert {"cronfleet_start_lag_seconds_bucket", "cronfleet_runs_finished_total", "cronfleet_queue_depth"} <= named


def test_the_alerts_cover_what_an_operator_must_hear_about():
    names = {rule["alert"] for group in ALERTS["groups"] for rule in group["rules"]}

    assert names >= {"CronfleetNoLiveBeat", "CronfleetDispatchLagHigh", "CronfleetDueBacklogGrowing",
                     "CronfleetFailureRateHigh", "CronfleetDeadRunsRising", "CronfleetNoLiveWorkerForQueue"}
    for group in ALERTS["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_dashboard_reads_the_provisioned_data_source():
    [source] = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())["datasources"]

    uids = {panel["datasource"]["uid"] for panel in DASHBOARD["panels"]}
    uids |= {target["datasource"]["uid"] for panel in DASHBOARD["panels"] for target in panel["targets"]}
    assert uids == {source["uid"]} and source["url"] == "http://prometheus:9090"
    assert DASHBOARD["uid"] == "cronfleet" and len({panel["id"] for panel in DASHBOARD["panels"]}) == len(
        DASHBOARD["panels"])


# --- docker-compose.yml ---------------------------------------------------------------------------


def test_compose_runs_prometheus_and_grafana_provisioned_from_deploy():
    services = COMPOSE["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]

    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert {"./deploy/grafana/provisioning:/etc/grafana/provisioning:ro",
            "./deploy/grafana/dashboards:/etc/grafana/dashboards:ro"} <= set(grafana["volumes"])
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
        "names": ["beat"], "type": "A", "port": port_option(services["beat"]["command"]), "refresh_interval": "30s"}
    assert jobs["cronfleet-worker"]["dns_sd_configs"][0]["port"] == port_option(services["worker"]["command"])
    assert "web" in (ROOT / ".env.example").read_text().split("DJANGO_ALLOWED_HOSTS=")[1].splitlines()[0].split(",")


def test_prometheus_scrapes_the_web_with_the_token_compose_requires():
    web, prometheus = COMPOSE["services"]["web"], COMPOSE["services"]["prometheus"]
    job = {job["job_name"]: job for job in yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())[
        "scrape_configs"]}["cronfleet-web"]

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
