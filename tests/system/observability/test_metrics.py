"""Metrics served by a real beat and a real prefork worker (through PROMETHEUS_MULTIPROC_DIR,
given or its own) count what the ledger holds."""

from __future__ import annotations

import os

import pytest

from scheduler_app import services
from scheduler_app.models import Job, JobRun
from tests.conftest import wait_for
from tests.support.observing import free_ports, scrape, start_worker, total

# --- real processes -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("directory", ["given", "its own"])
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_and_a_prefork_worker_serve_counts_that_match_the_ledger(
    tenant, processes, queue_name, tmp_path, directory
):
    beat_port, worker_port = free_ports(2)
    multiproc = tmp_path / "worker-metrics"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(multiproc)} if directory == "given" else {}
    ok = services.job_create(
        tenant, services.JobSpec(name="ok", task_name="scheduler_app.echo", every=1, queue=queue_name)
    )
    bad = services.job_create(
        tenant,
        services.JobSpec(name="bad", task_name="scheduler_app.fail", every=3600, queue=queue_name, max_attempts=1),
    )
    worker = start_worker(
        processes, queue_name, "worker", "--metrics-port", str(worker_port), "--metrics-address", "127.0.0.1", **env
    )
    processes.beat("beat", "--max-sleep", "1", "--metrics-port", str(beat_port), "--metrics-address", "127.0.0.1")
    services.job_trigger(bad, actor="test")

    wait_for(
        lambda: (
            JobRun.objects.filter(job=ok, state="succeeded").count() >= 3
            and JobRun.objects.filter(job=bad, state="dead").exists()
        ),
        timeout=60,
        what="runs to finish",
    )
    services.job_pause(Job.objects.get(id=ok.id), note="enough", actor="test")

    def ledger():
        return (
            JobRun.objects.filter(job=ok, state="succeeded").count(),
            JobRun.objects.filter(job=bad, state="dead").count(),
        )

    def counts_match():
        found = scrape(f"http://127.0.0.1:{worker_port}/metrics")
        return (
            total(found, "cronfleet_runs_finished_total", queue=queue_name, state="succeeded"),
            total(found, "cronfleet_runs_finished_total", queue=queue_name, state="dead"),
        ) == ledger()

    wait_for(
        lambda: JobRun.objects.filter(job=ok, state__in=["queued", "running"]).count() == 0,
        timeout=30,
        what="the last runs to finish",
    )
    wait_for(counts_match, timeout=30, what="the worker's counts to match the ledger")
    # The beat counts a turn's fires once the turn has committed and published them, so a fire
    # the ledger holds may be counted a moment later. A fire due as the job was paused is the
    # pause's to record (skipped, "paused: ..."), not the beat's.
    fires = lambda: JobRun.objects.filter(job=ok, trigger="schedule").exclude(state="skipped").count()  # noqa: E731
    wait_for(
        lambda: (
            total(
                scrape(f"http://127.0.0.1:{beat_port}/metrics"),
                "cronfleet_fires_total",
                queue=queue_name,
                outcome="queued",
            )
            == fires()
        ),
        timeout=30,
        what="the beat's fires to match the ledger",
    )
    beat = scrape(f"http://127.0.0.1:{beat_port}/metrics")
    assert total(beat, "cronfleet_fires_total", queue=queue_name, outcome="queued") == fires()
    assert total(beat, "cronfleet_beat_turns_total") >= 1
    assert total(beat, "cronfleet_dispatch_lag_seconds_count", queue=queue_name) >= 3
    found = scrape(f"http://127.0.0.1:{worker_port}/metrics")
    assert total(found, "cronfleet_run_duration_seconds_count", queue=queue_name, target="task") == sum(ledger())
    assert total(found, "cronfleet_runs_in_progress", queue=queue_name) == 0
    if directory == "given":
        assert len({path.name.rsplit("_", 1)[-1] for path in multiproc.glob("*.db")}) >= 2  # each child its own
    else:  # a directory of the worker's own, gone with it
        own = [line for line in processes.log("worker").splitlines() if "metrics on http://" in line]
        assert own and "(processes of " in own[0], processes.log("worker")
        directory_of_its_own = own[0].rsplit("(processes of ", 1)[1].rstrip(")")
        processes.stop(worker)
        assert not os.path.exists(directory_of_its_own)
