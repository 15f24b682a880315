"""Maintenance windows with a real beat and worker: one job's fires skipped and another's
deferred to the window's end, and a running run cancelled when a `cancel` window opens."""

from __future__ import annotations

import signal
from datetime import UTC, timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import AuditEvent, JobRun, RunState, db_now
from scheduler_app.services.windows import window_create
from tests.conftest import wait_for

ECHO = "scheduler_app.echo"


# --- a real beat and worker ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_skips_one_jobs_fires_and_defers_anothers_to_the_windows_end(processes, queue_name):
    tenant = services.tenant_create(slug="windows", name="Windows")
    processes.worker(queue_name)
    now = db_now()
    end = (now + timedelta(seconds=9)).replace(microsecond=0)
    window_create(tenant, name="db-upgrade", tags=["db"], starts_at=now - timedelta(minutes=1), ends_at=end)
    window_create(
        tenant, name="etl-freeze", action="defer", tags=["etl"], starts_at=now - timedelta(minutes=1), ends_at=end
    )
    skipping = services.job_create(
        tenant, services.JobSpec(name="skipping", task_name=ECHO, every=2, queue=queue_name, tags=["db"])
    )
    deferring = services.job_create(
        tenant, services.JobSpec(name="deferring", task_name=ECHO, every=2, queue=queue_name, tags=["etl"])
    )
    processes.beat("beat", "--max-sleep", "1")

    wait_for(
        lambda: JobRun.objects.filter(job=deferring, scheduled_at__gt=end, state=RunState.SUCCEEDED).exists(),
        timeout=90,
        what="the deferring job's schedule to go on after the window",
    )
    wait_for(
        lambda: JobRun.objects.filter(job=skipping, scheduled_at__gte=end, state=RunState.SUCCEEDED).exists(),
        timeout=60,
        what="the skipping job's runs after the window",
    )

    inside = JobRun.objects.filter(scheduled_at__lt=end)
    assert set(inside.filter(job=skipping).values_list("state", "reason")) == {
        (RunState.SKIPPED, "maintenance: db-upgrade")
    }
    assert set(inside.filter(job=deferring).values_list("state", "reason")) == {
        (RunState.SKIPPED, f"maintenance: etl-freeze: deferred to {end.astimezone(UTC).isoformat()}")
    }
    at_end = list(JobRun.objects.filter(job=deferring, scheduled_at=end))
    assert [run.state for run in at_end] == [RunState.SUCCEEDED]  # one coalesced run, and it ran
    assert at_end[0].started_at >= end
    after = JobRun.objects.filter(scheduled_at__gt=end, state__in=[RunState.SKIPPED, RunState.CANCELLED])
    assert not after.filter(job__in=[skipping, deferring]).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_cancels_a_running_run_when_a_cancel_window_opens(processes, queue_name):
    tenant = services.tenant_create(slug="windows-cancel", name="Windows")
    slow = services.job_create(
        tenant,
        services.JobSpec(
            name="slow",
            task_name="scheduler_app.sleep",
            every=3600,
            kwargs={"seconds": 120},
            queue=queue_name,
            tags=["db"],
        ),
    )
    worker = processes.worker(queue_name)
    processes.beat("beat", "--max-sleep", "1")
    run = services.job_trigger(slow)
    wait_for(
        lambda: JobRun.objects.filter(id=run.id, state=RunState.RUNNING).exists(),
        timeout=60,
        what="the slow run to start",
    )

    now = db_now()
    window_create(
        tenant, name="reindex", tags=["db"], running_policy="cancel", starts_at=now, ends_at=now + timedelta(minutes=10)
    )

    wait_for(
        lambda: JobRun.objects.filter(id=run.id, state=RunState.CANCELLED).exists(),
        timeout=60,
        what="the running run to be cancelled",
    )
    run.refresh_from_db()
    assert run.reason.startswith("maintenance: reindex: cancelled, the window is open until ")
    assert AuditEvent.objects.filter(run_id=run.id, action="run.cancelled", actor="beat").exists()
    # The task sleeps on, its run cancelled: a cold shutdown (SIGQUIT) ends the worker now,
    # where a warm one would wait out the teardown's bound.
    processes.stop(worker, signal.SIGQUIT)
