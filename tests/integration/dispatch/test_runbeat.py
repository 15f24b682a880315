"""The runbeat command run in this process: a database lost between a turn and the sleep costs
a retry, not the beat (a real runbeat process: the system tier's test_runbeat)."""

import signal
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import InterfaceError

from scheduler_app import dispatch, services
from scheduler_app.dispatch import laps
from scheduler_app.ledger import retention
from scheduler_app.management.commands import runbeat
from scheduler_app.models import Job, JobRun, db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.mark.parametrize("failing", ["retention step", "next due time"])
def test_the_database_lost_between_a_turn_and_the_sleep_costs_a_retry_not_the_beat(
    tenant, queue_name, monkeypatch, caplog, failing
):
    """After its turn the beat prunes and asks when the next job is due: both query the
    database, which may be gone by then (a failover). The beat retries; it used to exit."""
    services.job_create(
        tenant, services.JobSpec(name="every", task_name="scheduler_app.echo", every=1, queue=queue_name)
    )
    command = runbeat.Command()
    real_due, real_step = dispatch.seconds_until_due, retention.Pruner.step
    failures = []

    def lost_once(real):
        def call(*args, **kwargs):
            if not failures:
                failures.append(real.__name__)
                raise InterfaceError("the connection is closed")
            return real(*args, **kwargs)

        return call

    def due_then_stop(*args, **kwargs):  # the second turn reached its sleep: the retry worked
        if failing == "next due time" and not failures:
            return lost_once(real_due)(*args, **kwargs)
        command.stop.set()
        return real_due(*args, **kwargs)

    monkeypatch.setattr(dispatch, "seconds_until_due", due_then_stop)
    if failing == "retention step":
        monkeypatch.setattr(retention.Pruner, "step", lost_once(real_step))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        call_command(command, "--max-sleep", "1")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    assert failures, "the database error was never raised"
    assert "beat turn failed: InterfaceError: the connection is closed" in caplog.text


def test_a_beat_tells_where_its_turns_went_when_it_stops(tenant, queue_name, caplog):
    """dispatch/laps.py: a turn that claimed a job times each of its steps, and the beat
    tells their totals in one line as it stops (bench dispatch reads it back)."""
    job = services.job_create(
        tenant, services.JobSpec(name="every", task_name="scheduler_app.echo", every=60, queue=queue_name)
    )
    Job.objects.filter(id=job.id).update(next_run_at=db_now() - timedelta(seconds=1))  # due now
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with caplog.at_level("INFO", logger="scheduler_app.beat"):
            call_command(runbeat.Command(), "--once")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    told = laps.parse_line(caplog.text)
    assert told is not None, caplog.text
    turns, steps = told
    assert turns == 1
    expected = {"claim", "overlap", "windows", "calendars", "plan", "checkins", "quotas", "insert", "advance"}
    assert expected | {"commit", "publish", "lost", "retries", "sweep"} <= set(steps), steps
    assert all(seconds >= 0 for seconds in steps.values())
    assert JobRun.objects.filter(job=job).exists()  # the turn claimed and recorded the fire
