"""A zoned job across a repeated wall minute, with a real beat and worker.

The schedule arithmetic is checked against a brute-force reference in test_dst_reference.py;
this checks the hand-off from the beat's plan to the zone. No real zone repeats an hour
within a test's minutes, so the test compiles one with `zic` whose clocks go back one minute
a minute from now, and points the beat, the worker and this process at it. The fires
in the ledger and at the receiver are then counted against the same reference: an hourly job
fires in both passes of the repeated minute, a fixed-time job in the first only.
"""

from __future__ import annotations

import os
import subprocess
import uuid
import zoneinfo
from datetime import datetime, timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState, db_now
from scheduler_app.schedules import zones
from scheduler_app.services.jobspec import JobSpec
from tests.conftest import wait_for
from tests.faults.harness import CLUSTER_ENV, EARLY_TOLERANCE, FAULT_LAG_BOUND, START_TIMEOUT
from tests.unit.schedules.test_dst_reference import MINUTE, Expression, reference_fires

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]

LEAD = timedelta(seconds=8)  # at least, from the jobs' creation to the first pass of the repeated minute
TAIL = timedelta(seconds=3)  # past the second pass, once its fire has arrived
FIRES = 3  # both jobs in the first pass, the hourly one in the second


def compile_zone(directory, name: str, first_pass: datetime) -> None:
    """Write the zone `name` into `directory`: its clocks show a whole minute at `first_pass`
    (UTC) and go back one minute at `first_pass` + 1 min, so that wall minute is shown twice.
    The offsets carry seconds (as the zones' old local mean times did) to put the repeated
    minute this close to now rather than on the next whole UTC minute."""
    after = -timedelta(seconds=first_pass.second)
    source = directory / "fold.zi"
    source.write_text(
        f"Zone {name} {zic_offset(after + MINUTE)} - FLA {first_pass + MINUTE:%Y %b %d %H:%M:%S}u\n"
        f"{' ' * (len(name) + 5)}{zic_offset(after)} - FLB\n"
    )
    subprocess.run(["zic", "-d", str(directory), str(source)], check=True, capture_output=True, text=True)


def zic_offset(offset: timedelta) -> str:
    seconds = int(offset.total_seconds())
    return f"{'-' if seconds < 0 else ''}0:{abs(seconds) // 60:02d}:{abs(seconds) % 60:02d}"


@pytest.fixture
def zone_directory(tmp_path):
    """A folder of zones searched first by this process and by the processes started with the
    PYTHONTZPATH it yields; a zone compiled into it later is found by each on first use."""
    before = zoneinfo.TZPATH
    zoneinfo.reset_tzpath([str(tmp_path), *before])
    try:
        yield tmp_path, os.pathsep.join([str(tmp_path), *before])
    finally:
        zoneinfo.reset_tzpath(before)
        zoneinfo.ZoneInfo.clear_cache()
        zones._zone_names.cache_clear()  # the names read while the folder was searched
        zones._zone_names_by_folded.cache_clear()


def test_a_zoned_job_fires_as_cron_does_across_a_repeated_wall_minute(cluster, zone_directory, settings):
    directory, tzpath = zone_directory
    settings.CRONFLEET_ALLOWED_TASKS = [CLUSTER_ENV["CRONFLEET_ALLOWED_TASKS"]]
    cluster.worker("worker", PYTHONTZPATH=tzpath)
    cluster.beat("beat", PYTHONTZPATH=tzpath)
    wait_for(cluster.started, timeout=START_TIMEOUT, interval=0.1, what="the beat and the worker to start")

    first_pass = (db_now() + LEAD).replace(microsecond=0)
    fold_at = first_pass + MINUTE  # the clocks go back, to the wall time they showed at first_pass
    name = f"Cronfleet/Fold{uuid.uuid4().hex[:8]}"
    compile_zone(directory, name, first_pass)
    zones._zone_names.cache_clear()
    zones._zone_names_by_folded.cache_clear()
    tz = zoneinfo.ZoneInfo(name)
    repeated = first_pass.astimezone(tz)  # the wall minute shown twice
    assert repeated.second == 0 and fold_at.astimezone(tz).replace(tzinfo=None) == repeated.replace(tzinfo=None)
    expressions = {
        "hourly": f"{repeated.minute} * * * *",
        "fixed-time": f"{repeated.minute} {repeated.hour} * * *",
    }

    created_at = db_now()
    jobs = {
        label: services.job_create(
            cluster.tenant,
            JobSpec(
                name=f"fold-{label}",
                task_name="faults.deliver",
                cron=text,
                timezone=name,
                queue=cluster.queue,
                kwargs={"url": cluster.receiver.url},
            ),
        )
        for label, text in expressions.items()
    }
    assert created_at < first_pass
    until = fold_at + TAIL  # past the second pass; neither job fires again for an hour
    wait_for(
        lambda: db_now() >= until and len(cluster.receiver.snapshot()) >= FIRES,
        timeout=(until - created_at).total_seconds() + 60,
        interval=0.5,
        what="the end of the second pass",
    )
    cluster.finish()

    deliveries = cluster.receiver.snapshot()
    for label, job in jobs.items():
        expected = reference_fires(Expression(expressions[label]), tz, first_pass, until)
        runs = list(JobRun.objects.filter(job=job).order_by("scheduled_at"))
        assert [run.scheduled_at for run in runs] == expected, label
        assert all(run.state == RunState.SUCCEEDED for run in runs), [(run.state, run.reason) for run in runs]
        arrived = sorted((d for d in deliveries if d.job_id == job.id), key=lambda d: d.scheduled_at)
        assert [d.scheduled_at for d in arrived] == expected, label
        for d in arrived:
            assert -EARLY_TOLERANCE <= (d.arrived_at - d.scheduled_at).total_seconds() < FAULT_LAG_BOUND, d
        assert Job.objects.get(pk=job.pk).next_run_at > until

    # What the reference says, in words: the hourly job in both passes, the other in the first.
    assert len(deliveries) == FIRES
    assert [run.scheduled_at for run in JobRun.objects.filter(job=jobs["hourly"]).order_by("scheduled_at")] == [
        first_pass,
        fold_at,
    ]
    assert [run.scheduled_at for run in JobRun.objects.filter(job=jobs["fixed-time"])] == [first_pass]
