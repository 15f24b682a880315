"""The ready-made monitoring checked by promtool: deploy/prometheus's scrape config, alert rules
(the fleet objectives' burn rates too) and their unit tests, and deploy/grafana's dashboard queries parsing as PromQL (what needs no
promtool: tests/unit/observability/test_monitoring.py)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from tests.unit.observability.test_monitoring import PROMETHEUS, dashboard_queries


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
    objectives = promtool("check", "rules", "objectives.yml")

    assert config.returncode == 0, config.stdout + config.stderr
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 10 rules found" in rules.stdout
    assert objectives.returncode == 0, objectives.stdout + objectives.stderr
    assert "SUCCESS: 11 rules found" in objectives.stdout  # 7 burn rates, 4 alerts


def test_the_alerts_fire_on_the_series_they_are_about():
    done = promtool("test", "rules", "alerts_test.yml")

    assert done.returncode == 0, done.stdout + done.stderr


def test_the_burn_rate_alerts_fire_on_the_windows_they_are_about():
    done = promtool("test", "rules", "objectives_test.yml")

    assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_query_is_promql(tmp_path):
    # promtool parses expressions in rule files: the dashboard's, as recording rules.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{n}", "expr": expr} for n, expr in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))

    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(tmp_path / "dashboard.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stdout + done.stderr
