"""The proof of the fleet objectives' alerts: a real Prometheus, with deploy/prometheus's
objective rules, scrapes a real web server while a real beat counts a tenant's objectives and
a real worker runs its jobs. A run of failures makes the fast burn-rate alert of the success
objective fire; fires on a queue no worker consumes make the start objective's fire; what
Prometheus reads (events, good events, budget left) matches the ledger."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from scheduler_app import services
from scheduler_app.models import JobRun, RunState, db_now
from scheduler_app.services.objectives import objective_create
from tests.conftest import ROOT, take_broker_messages, wait_for
from tests.support.observing import free_ports, start_worker
from tests.support.web import get_or_none
from tests.system.observability.test_monitoring import tool
from tests.system.observability.test_prometheus import Prometheus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAILURES = 5
UNSTARTED = 3


def config(web: int) -> dict:
    """deploy/prometheus's objective rules, the web as the target, everything every second."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ROOT / "deploy" / "prometheus" / "objectives.yml")],
        "scrape_configs": [{"job_name": "web", "static_configs": [{"targets": [f"127.0.0.1:{web}"]}]}],
    }


def test_a_run_of_failures_makes_the_burn_rate_alert_fire(tenant, processes, queue_name, tmp_path):
    prometheus_bin = tool("prometheus")
    web, prometheus_port = free_ports(2)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config(web)))
    check = subprocess.run(
        [tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    objective = objective_create(tenant, name="runs", kind="success", target="99%")
    label = f'objective="{objective}"'
    # The jobs tagged "idle" wait on a queue nobody consumes: their fires never start.
    idle_queue = f"{queue_name}-idle"
    starts = objective_create(tenant, name="idle-starts", kind="start", threshold_seconds=2, tag="idle", target="99%")
    start_label = f'objective="{starts}"'

    server = processes.start(
        "web",
        [sys.executable, "-m", "gunicorn", "-c", "project/gunicorn.conf.py"],
        CRONFLEET_VAR_DIR=str(tmp_path),
        CRONFLEET_WEB_BIND=f"127.0.0.1:{web}",
        CRONFLEET_WEB_WORKERS="1",
        CRONFLEET_WEB_THREADS="2",
    )
    wait_for(lambda: server.poll() is not None or get_or_none(web, "/healthz") == 200, timeout=60, what="the web")
    start_worker(processes, queue_name, "worker")
    processes.beat("beat", "--max-sleep", "1", CRONFLEET_ALERT_CHECK_SECONDS="1")  # counts every second
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
    # The counters at 0 before any event, so the failures are an increase Prometheus sees.
    wait_for(
        lambda: prom.value(f"cronfleet_objective_events_total{{{label}}}") == 0,
        timeout=60,
        what="the objective's counters at 0",
    )
    assert prom.value(f"cronfleet_objective_target{{{label}}}") == 0.99
    assert "CronfleetObjectiveBudgetBurningFast" not in prom.alerts()

    now = db_now()
    for n in range(FAILURES):
        services.job_create(
            tenant,
            services.JobSpec(
                name=f"broken-{n}", task_name="scheduler_app.fail", at=now, queue=queue_name, max_attempts=1
            ),
        )
    for n in range(UNSTARTED):
        services.job_create(
            tenant,
            services.JobSpec(
                name=f"waits-{n}", task_name="scheduler_app.echo", at=now, queue=idle_queue, tags=["idle"]
            ),
        )
    wait_for(
        lambda: JobRun.objects.filter(state=RunState.DEAD).count() == FAILURES,
        timeout=60,
        what=f"{FAILURES} runs to die",
    )
    wait_for(
        lambda: prom.value(f"cronfleet_objective_events_total{{{label}}}") == FAILURES,
        timeout=60,
        what="Prometheus to read the beat's count of the failures",
    )
    wait_for(lambda: str(objective) in burning(prom), timeout=60, what="the fast burn-rate alert to fire")

    assert prom.value(f"cronfleet_objective_good_events_total{{{label}}}") == 0
    assert prom.value(f"cronfleet_objective_attainment{{{label}}}") == 0
    # 5 bad events where the target allows 1 % of 5: the budget is overspent 99 times over.
    assert prom.value(f"cronfleet_objective_error_budget_remaining{{{label}}}") == pytest.approx(1 - 5 / 0.05)
    try:
        # Each waiting fire is a bad start event once its 2 seconds are over: the page fires for it too.
        wait_for(
            lambda: prom.value(f"cronfleet_objective_events_total{{{start_label}}}") == UNSTARTED,
            timeout=60,
            what="Prometheus to read the fires that did not start",
        )
        wait_for(
            lambda: str(starts) in burning(prom),
            timeout=60,
            what="the fast burn-rate alert of the start objective to fire",
        )
        assert JobRun.objects.filter(job__queue=idle_queue, started_at__isnull=True).count() == UNSTARTED
        assert prom.value(f"cronfleet_objective_good_events_total{{{start_label}}}") == 0
        assert burning(prom) == {str(objective): "critical", str(starts): "critical"}
    finally:
        take_broker_messages(idle_queue)


def burning(prom: Prometheus) -> dict[str, str]:
    """{objective: severity} of the fast burn-rate alerts firing."""
    return {
        alert["labels"]["objective"]: alert["labels"]["severity"]
        for alert in prom.get("/api/v1/alerts")["data"]["alerts"]
        if alert["labels"]["alertname"] == "CronfleetObjectiveBudgetBurningFast" and alert["state"] == "firing"
    }
