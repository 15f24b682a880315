"""The SQLite demo's dashboard in headless Chromium: the embedded setup (no DATABASE_URL, a
throwaway CRONFLEET_VAR_DIR), the runs of tests/system/observability/test_dashboard_sqlite.py seeded, `manage.py
runserver` serving it; a person logs in, the charts are drawn as SVG with marks, and a
screenshot is saved under var/test-artifacts/console/ for a person to look at."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import ROOT
from tests.support import browser
from tests.support.embedded import DASHBOARD_SCRIPT as SCRIPT
from tests.support.embedded import embedded_env

pytestmark = pytest.mark.skipif(not browser.available(), reason="chromium and chromedriver are not installed")
ARTIFACTS = ROOT / "var" / "test-artifacts" / "console"
CHARTS = ("cf-runs-hour", "cf-lag-hour", "cf-dispatch-hour", "cf-runs-day", "cf-failure-day", "cf-forecast")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    env = embedded_env(tmp_path)
    manage = str(ROOT / "manage.py")
    subprocess.run(
        [sys.executable, manage, "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=240,
    )
    subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, check=True, capture_output=True, timeout=240)
    port = free_port()
    # --insecure: the admin's static files without debug, as the demo's web server has them.
    process = subprocess.Popen(
        [sys.executable, manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/admin/login/", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_sqlite_dashboard_draws_its_charts(server):
    chromium = browser.Browser(width=1280, height=1400)
    try:
        chromium.log_in(
            f"{server}/admin/login/?next=/admin/dashboard/",
            "admin",
            "pw",
            until="document.querySelector('#cf-dashboard')",
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        chromium.screenshot(ARTIFACTS / "dashboard-sqlite.png")
        drawn = chromium.js(
            "return arguments[0].map(id => { const s = document.querySelector('#' + id + ' svg');"
            " return [id, !!s, s ? s.querySelectorAll('.cf-point, polyline').length : 0]; })",
            list(CHARTS),
        )
        for panel, has_svg, marks in drawn:
            assert has_svg, f"{panel}: no chart"
            assert marks > 0, f"{panel}: an empty chart"
        assert "computed in Python" in chromium.js("return document.querySelector('#cf-engine-note').innerText")
        assert chromium.js("return document.querySelector('#cf-hour-runs').innerText") == "11"
    finally:
        chromium.close()
