"""The plain autoscaling script (deploy/autoscale.py, docs/autoscaling.md) run as a process: it
reads the recommended workers from Cronfleet's /metrics or from Prometheus, names a queue the
metrics lack and refuses bad input naming the flag."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from scheduler_app.observability import forecast
from tests.integration.observability.test_forecast_metrics import fleet, forecast_settings  # noqa: F401 (fixtures)
from tests.unit.observability.test_forecast_metrics import NOW, SCRIPT

# --- the plain script -------------------------------------------------------------------------


def script(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def served():
    """A local HTTP server answering every GET with the body in served.body (and its path)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            server.paths.append(self.path)
            server.auth.append(self.headers.get("Authorization"))
            body = server.body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.body, server.paths, server.auth = "", [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_script_reads_the_workers_from_cronfleets_metrics(client, fleet, monkeypatch, served, tmp_path):
    monkeypatch.setattr(forecast, "db_now", lambda: NOW)
    served.body = client.get("/metrics").content.decode()
    url = f"http://127.0.0.1:{served.server_port}/metrics"
    out = tmp_path / "scaled"

    alpha = script("--metrics-url", url, "--queue", "alpha", "--once", "--token", "t0k")
    bounded = script("--metrics-url", url, "--queue", "alpha", "--once", "--max", "2")
    ran = script(
        "--metrics-url",
        url,
        "--once",
        "--min",
        "7",
        "--run",
        f"{sys.executable} -c \"import sys; open(sys.argv[1], 'w').write(sys.argv[2])\" {out} {{n}}",
    )

    assert (alpha.returncode, alpha.stdout) == (0, "10\n"), alpha.stderr
    assert served.auth[0] == "Bearer t0k"
    assert bounded.stdout == "2\n"
    assert ran.returncode == 0, ran.stderr
    assert out.read_text() == "7"  # the default queue's 5, raised to --min


def test_the_script_reads_the_workers_from_prometheus(served):
    served.body = (
        '{"status": "success", "data": {"resultType": "vector", "result": ['
        '{"metric": {"queue": "beta"}, "value": [1, "4"]}, {"metric": {"queue": "beta"}, "value": [1, "6"]}]}}'
    )

    done = script("--prometheus", f"http://127.0.0.1:{served.server_port}", "--queue", "beta", "--once")

    assert (done.returncode, done.stdout) == (0, "6\n"), done.stderr
    assert served.paths[0].startswith("/api/v1/query?query=cronfleet_forecast_workers%7Bqueue%3D%22beta%22%7D")


def test_a_queue_the_metrics_lack_is_an_error_that_names_it(served):
    served.body = 'cronfleet_forecast_workers{queue="alpha"} 3.0\n'

    done = script("--metrics-url", f"http://127.0.0.1:{served.server_port}/metrics", "--queue", "gamma", "--once")

    assert done.returncode == 1 and "queue='gamma'" in done.stderr


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--metrics-url", "ftp://x/metrics", "--once"], "--metrics-url"),
        (["--prometheus", "prometheus:9090", "--once"], "--prometheus"),
        (["--metrics-url", "http://x/metrics", "--once", "--min", "-1"], "--min"),
        (["--metrics-url", "http://x/metrics", "--once", "--min", "3", "--max", "2"], "--max"),
        (["--metrics-url", "http://x/metrics", "--once", "--run", "scale worker"], "--run"),
        (["--metrics-url", "http://x/metrics", "--interval", "0"], "--interval"),
        (["--metrics-url", "http://x/metrics", "--interval", "soon"], "--interval"),
        (["--once"], "--metrics-url"),
    ],
)
def test_bad_input_is_refused_naming_the_flag(args, flag):
    done = script(*args)

    assert (
        done.returncode == 2
        and f"argument {flag}" in done.stderr
        or (flag == "--metrics-url" and done.returncode == 2 and "--metrics-url" in done.stderr)
    ), done.stderr
