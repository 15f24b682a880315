"""The dashboard, the job page and the run page on the embedded SQLite demo (no DATABASE_URL):
a real `manage.py migrate` into a throwaway CRONFLEET_VAR_DIR, runs seeded through the services
and the models in a subprocess that renders the pages with Django's test client
(tests/support/embedded.py's DASHBOARD_SCRIPT), and the figures shown checked against the
seeded runs. Needs no PostgreSQL or Redis; the same definition of the totals on PostgreSQL is
tested in tests/integration/observability/test_dashboard_sqlite.py, and that its header adds
up to its panels in tests/integration/observability/test_dashboard_totals.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.support.dashboard_sums import disagreements, totals_and_sums
from tests.support.embedded import DASHBOARD_SCRIPT, embedded_env


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    var_dir = tmp_path_factory.mktemp("embedded")
    env = embedded_env(var_dir)
    manage = str(ROOT / "manage.py")
    migrate = subprocess.run(
        [sys.executable, manage, "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert migrate.returncode == 0, migrate.stderr
    seeded = subprocess.run(
        [sys.executable, "-c", DASHBOARD_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert seeded.returncode == 0, seeded.stderr
    return {**json.loads(seeded.stdout), "stderr": seeded.stderr}


def text_of(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</', html, re.S)
    assert found, f"no #{element_id}"
    return found.group(1).strip()


def section(html: str, element_id: str) -> str:
    found = re.search(rf'<section class="cf-panel[^"]*" id="{element_id}">(.*?)</section>', html, re.S)
    assert found, f"no panel #{element_id}"
    return found.group(1)


def test_the_sqlite_dashboard_draws_every_panel(pages):
    page = pages["dashboard"]
    assert page["status"] == 200
    html = page["html"]
    assert "needs PostgreSQL" not in html
    assert "computed in Python" in text_of(html, "cf-engine-note")
    for panel in ("cf-runs-hour", "cf-lag-hour", "cf-dispatch-hour", "cf-runs-day", "cf-failure-day", "cf-forecast"):
        assert "<svg" in section(html, panel), panel
    # Runs were drawn: the hour's bars and both lag lines have marks, the forecast has fires.
    assert 'data-series="succeeded"' in section(html, "cf-runs-hour")
    assert 'data-series="failed"' in section(html, "cf-runs-hour")
    assert "cf-series-p99" in section(html, "cf-lag-hour")
    assert "cf-series-p50" in section(html, "cf-dispatch-hour")
    assert "no data" not in section(html, "cf-forecast")
    failing = section(html, "cf-failing")
    assert "demo/flaky" in failing and "<td>4</td>" in failing  # 2 failed + 1 dead this hour, 1 failed earlier
    assert "<td>17</td><td>4</td>" in section(html, "cf-tenants")  # runs finished, failed + dead
    assert "cf-alerts" in html and "cf-nodes" in html and "cf-queues" in html


def test_the_totals_follow_one_definition_and_the_day_holds_the_hour(pages):
    html = pages["dashboard"]["html"]
    assert text_of(html, "cf-hour-runs") == "11"  # succeeded + failed + dead; the skipped run is apart
    assert text_of(html, "cf-hour-failures") == "3"
    assert text_of(html, "cf-hour-rate") == f"{100 * 3 / 11:.2f}"
    assert text_of(html, "cf-hour-other") == "1"
    # The day: the hour's 11 + 5 + 1 earlier; none older than a day.
    assert text_of(html, "cf-day-runs") == "17"
    assert text_of(html, "cf-day-failures") == "4"
    assert text_of(html, "cf-day-rate") == f"{100 * 4 / 17:.2f}"
    assert int(text_of(html, "cf-day-runs")) >= int(text_of(html, "cf-hour-runs"))


@pytest.mark.parametrize("page", ["dashboard", "tenant"])
def test_the_header_s_totals_equal_the_panels_sums(pages, page):
    html = pages[page]["html"]

    assert disagreements(html) == {}, totals_and_sums(html)
    assert totals_and_sums(html)["day runs / day chart"] == (17, 17)


def test_the_forecast_metrics_are_read_on_sqlite(pages):
    from prometheus_client.parser import text_string_to_metric_families

    assert pages["metrics"]["status"] == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(pages["metrics"]["html"])
        for s in family.samples
    }
    fires = {labels: value for (name, labels), value in samples.items() if name == "cronfleet_forecast_fires"}
    # flaky fires every minute, young every five: due within the quarter hour, in the default queue
    assert sum(value for labels, value in fires.items() if ("horizon", "15m") in labels) >= 15
    assert "forecast" not in pages["stderr"], pages["stderr"]


def test_one_tenants_sqlite_dashboard(pages):
    page = pages["tenant"]
    assert page["status"] == 200
    assert text_of(page["html"], "cf-hour-runs") == "11"


def test_the_job_and_run_pages_render_on_sqlite(pages):
    for name in ("job", "young", "run"):
        assert pages[name]["status"] == 200, name
    assert "<svg" in pages["job"]["html"]


def test_a_young_jobs_timeline_spans_its_lifetime(pages):
    html = pages["young"]["html"]
    timeline = re.search(r'<figure class="cf-chart cf-timeline">.*?</figure>', html, re.S).group(0)
    xs = sorted(float(x) for x in re.findall(r'<rect class="cf-point[^>]* x="([\d.]+)"', timeline))
    assert len(xs) == 3
    # Over 24 hours the three fires (80 minutes apart at most) fell within a few pixels; over the
    # job's two hours they spread across the axis.
    assert xs[-1] - xs[0] > 200
    assert "since the job was created" in timeline
