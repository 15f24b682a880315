"""The proof: a real Prometheus scrapes a real web server, beat and worker on loopback,
with Cronfleet's alert rules loaded; a few jobs run (one fails for good, two wait on a queue
no worker consumes), and what Prometheus answers through its HTTP API (successes, failures,
the queue's depth, the live beats) matches the ledger."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest
import yaml

from scheduler_app import services
from scheduler_app.models import JobRun, NodeKind, RunState, db_now
from scheduler_app.observability.nodes import node_states
from tests.conftest import ROOT, take_broker_messages, wait_for
from tests.support.observing import free_ports, start_worker
from tests.support.web import get_or_none
from tests.system.observability.test_monitoring import tool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **query) -> dict:
        url = f"{self.base}{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def value(self, query: str) -> float | None:
        """The single value of an instant query; None when it has no result."""
        result = self.get("/api/v1/query", query=query)["data"]["result"]
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def targets_up(self) -> dict[str, float | None]:
        return {job: self.value(f'up{{job="{job}"}}') for job in ("web", "beat", "worker")}

    def alerts(self) -> dict[str, str]:
        return {alert["labels"]["alertname"]: alert["state"] for alert in self.get("/api/v1/alerts")["data"]["alerts"]}


TOKEN = "metrics-token-for-this-test-only"


def config(web: int, beat: int, worker: int, token_file) -> dict:
    """deploy/prometheus's alert rules, these processes as targets, everything every second;
    the web scraped with its token, as deploy/prometheus does."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ROOT / "deploy" / "prometheus" / "alerts.yml")],
        "scrape_configs": [
            {
                "job_name": "web",
                "authorization": {"credentials_file": str(token_file)},
                "static_configs": [{"targets": [f"127.0.0.1:{web}"]}],
            },
            {"job_name": "beat", "static_configs": [{"targets": [f"127.0.0.1:{beat}"]}]},
            {"job_name": "worker", "static_configs": [{"targets": [f"127.0.0.1:{worker}"]}]},
        ],
    }


def test_prometheus_reports_what_the_ledger_says(tenant, processes, queue_name, tmp_path):
    prometheus_bin = tool("prometheus")
    web, beat, worker, prometheus_port = free_ports(4)
    idle_queue = f"{queue_name}-idle"  # published to, consumed by nobody
    (tmp_path / "token").write_text(TOKEN + "\n")  # as an editor saves it: Prometheus trims it
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config(web, beat, worker, tmp_path / "token")))
    check = subprocess.run(
        [tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr

    server = processes.start(
        "web",
        [sys.executable, "-m", "gunicorn", "-c", "project/gunicorn.conf.py"],
        CRONFLEET_VAR_DIR=str(tmp_path),
        CRONFLEET_WEB_BIND=f"127.0.0.1:{web}",
        CRONFLEET_WEB_WORKERS="1",
        CRONFLEET_WEB_THREADS="2",
        CRONFLEET_METRICS_TOKEN=TOKEN,
    )
    wait_for(lambda: server.poll() is not None or get_or_none(web, "/healthz") == 200, timeout=60, what="the web")
    assert get_or_none(web, "/metrics") == 401  # a scrape without the token
    start_worker(processes, queue_name, "worker", "--metrics-port", str(worker), "--metrics-address", "127.0.0.1")
    processes.beat("beat", "--max-sleep", "1", "--metrics-port", str(beat), "--metrics-address", "127.0.0.1")
    processes.start(
        "prometheus",
        [
            prometheus_bin,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
    )
    prom = Prometheus(prometheus_port)
    wait_for(prom.ready, timeout=60, what="Prometheus to be ready")
    wait_for(
        lambda: prom.targets_up() == {"web": 1, "beat": 1, "worker": 1},
        timeout=60,
        what="Prometheus to scrape the web, the beat and the worker",
    )
    # Every series of the worker exists at 0 before any run ends (so the first dead run is an increase).
    wait_for(
        lambda: prom.value(f'sum(cronfleet_runs_finished_total{{queue="{queue_name}",state="dead"}})') == 0,
        timeout=30,
        what="the worker's series at 0",
    )

    now = db_now()
    for name in ("a", "b", "c"):
        services.job_create(
            tenant, services.JobSpec(name=name, task_name="scheduler_app.echo", at=now, queue=queue_name)
        )
    services.job_create(
        tenant,
        services.JobSpec(name="broken", task_name="scheduler_app.fail", at=now, queue=queue_name, max_attempts=1),
    )
    for name in ("waits-1", "waits-2"):
        services.job_create(
            tenant, services.JobSpec(name=name, task_name="scheduler_app.echo", at=now, queue=idle_queue)
        )
    try:
        wait_for(
            lambda: (
                JobRun.objects.filter(state=RunState.SUCCEEDED).count() == 3
                and JobRun.objects.filter(state=RunState.DEAD).count() == 1
                and JobRun.objects.filter(job__queue=idle_queue, state=RunState.QUEUED).count() == 2
            ),
            timeout=60,
            what="three runs to succeed, one to die and two to wait",
        )
        ledger = {
            "succeeded": JobRun.objects.filter(job__queue=queue_name, state=RunState.SUCCEEDED).count(),
            "failed": JobRun.objects.filter(job__queue=queue_name, state__in=[RunState.FAILED, RunState.DEAD]).count(),
            "depth": JobRun.objects.filter(job__queue=idle_queue, state=RunState.QUEUED).count(),
            "beats": sum(1 for node in node_states(db_now(), kind=NodeKind.BEAT) if node.live),
            "fires": JobRun.objects.filter(job__queue=queue_name).count(),  # each queued by the beat
        }
        queries = {
            "succeeded": f'sum(cronfleet_runs_finished_total{{queue="{queue_name}",state="succeeded"}})',
            "failed": f'sum(cronfleet_runs_finished_total{{queue="{queue_name}",state=~"failed|dead"}})',
            "depth": f'cronfleet_queue_depth{{queue="{idle_queue}"}}',
            "beats": 'cronfleet_nodes{kind="beat",state="live"}',
            # The beat's own exporter, scraped apart from the web's and the worker's.
            "fires": f'sum(cronfleet_fires_total{{queue="{queue_name}",outcome="queued"}})',
        }

        def prometheus_agrees() -> dict | None:
            found = {name: prom.value(query) for name, query in queries.items()}
            return found if found == ledger else None

        found = wait_for(prometheus_agrees, timeout=30, what=f"Prometheus to report the ledger's {ledger}")
        assert found == {"succeeded": 3, "failed": 1, "depth": 2, "beats": 1, "fires": 4}
        # The failure ratio the README's PromQL computes, and the alert on dead runs.
        ratio = prom.value(
            f'sum(cronfleet_runs_finished_total{{queue="{queue_name}",state=~"failed|dead"}}) / '
            f'sum(cronfleet_runs_finished_total{{queue="{queue_name}"}})'
        )
        assert ratio == pytest.approx(1 / 4)
        wait_for(
            lambda: prom.alerts().get("CronfleetDeadRunsRising") == "firing",
            timeout=30,
            what="the dead-runs alert to fire",
        )
        assert prom.value(f'cronfleet_queue_workers{{queue="{idle_queue}"}}') == 0
        assert "CronfleetNoLiveBeat" not in prom.alerts()
    finally:
        take_broker_messages(idle_queue)
