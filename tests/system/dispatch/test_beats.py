"""Several real `runbeat` processes against one PostgreSQL, with no leader.

5,000 jobs fall due at the same instant and then every second; afterwards the ledger must
hold exactly one run for every fire time of every job, with no gap, and the broker exactly
one message per run (no beat published a run another beat recorded).
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Count, Max, Min

from scheduler_app.models import Job, JobRun, RunState, db_now
from tests.conftest import take_broker_messages, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JOBS = 5000
SECONDS = 5


NOT_YET = datetime(2999, 1, 1, tzinfo=UTC)


def seed_every_second_jobs(tenant, queue, count):
    """The jobs, not yet due: make_due() starts them once every beat is up, so that a loaded
    machine's slow start-up is not counted (nor a SIGTERM sent before a beat can take it)."""
    Job.objects.bulk_create(
        Job(
            tenant=tenant,
            name=f"every-second-{i}",
            task_name="scheduler_app.echo",
            every_seconds=1,
            anchor_at=NOT_YET,
            next_run_at=NOT_YET,
            queue=queue,
        )
        for i in range(count)
    )


def make_due(tenant, processes, names):
    wait_for(
        lambda: all("runbeat: started" in processes.log(name) for name in names), timeout=60, what="every beat to start"
    )
    start = (db_now() + timedelta(seconds=2)).replace(microsecond=0)
    Job.objects.filter(tenant=tenant).update(anchor_at=start, next_run_at=start)
    return start


def published_run_ids(queue):
    return [message["args"][0] for message in take_broker_messages(queue)]


@pytest.mark.parametrize("beats", [2, 4])
def test_several_beats_record_every_fire_exactly_once(beats, tenant, processes, queue_name):
    seed_every_second_jobs(tenant, queue_name, JOBS)
    # No worker drains the queue: backpressure, which would hold fires back, is off.
    procs = [
        processes.beat(f"beat{i}", "--batch-size", "500", "--max-sleep", "1", CRONFLEET_QUEUE_HIGH_WATER="0")
        for i in range(beats)
    ]
    start = make_due(tenant, processes, [f"beat{i}" for i in range(beats)])

    wait_for(lambda: db_now() > start + timedelta(seconds=SECONDS), timeout=60, what="the load window to pass")
    for proc in procs:
        assert processes.stop(proc) == 0

    ledger = {
        row["job_id"]: row
        for row in JobRun.objects.values("job_id").annotate(
            n=Count("id"), first=Min("scheduled_at"), last=Max("scheduled_at")
        )
    }
    assert len(ledger) == JOBS
    for job in Job.objects.filter(tenant=tenant).only("id", "next_run_at"):
        row = ledger[job.id]
        fires = int((job.next_run_at - start).total_seconds())  # start, start+1s, ..., next_run_at-1s
        # (job, scheduled_at) is unique, so count == fires with these bounds means no gap.
        assert (row["n"], row["first"], row["last"]) == (fires, start, job.next_run_at - timedelta(seconds=1)), job.id
    expected_total = sum(row["n"] for row in ledger.values())
    # How far the beats got is a speed (bench dispatch measures it); a loaded machine may fall
    # behind the window, but beats that stall after their first turn would not get past one fire.
    print(f"{beats} beats recorded {expected_total:,} fires of {JOBS * SECONDS:,} due in the window")
    assert expected_total >= JOBS * 2
    assert set(JobRun.objects.values_list("state", flat=True).distinct()) == {RunState.QUEUED}
    assert not JobRun.objects.filter(scheduled_at__lt=start).exists()

    published = published_run_ids(queue_name)
    assert len(published) == expected_total  # one message per run: no beat published twice
    assert len(set(published)) == expected_total
    worked = [name for name in (f"beat{i}" for i in range(beats)) if "beat turn: claimed" in processes.log(name)]
    assert len(worked) >= 2, "expected the due set to be shared between beats"
