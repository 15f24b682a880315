"""Backpressure with real processes: a beat on RabbitMQ holds back a full queue, and with a
high-water mark a tenant's spike does not bury the next tenant's fires at the workers
(DESIGN §7: keep the broker shallow so fairness decided in the database holds there).
"""

from datetime import timedelta

import pytest

from scheduler_app.models import Job, JobRun, RunState, Tenant, db_now
from tests.conftest import AMQP_URL, wait_for
from tests.integration.dispatch.test_backpressure import one_offs


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_beat_on_rabbitmq_holds_back_a_full_queue(tenant, processes, rabbitmq_queue):
    """The depth check against RabbitMQ: a queue it does not know yet, then one at the mark."""
    start = db_now() - timedelta(seconds=1)
    one_offs(tenant, 20, start, queue=rabbitmq_queue)

    processes.beat(
        "beat",
        "--max-sleep",
        "1",
        "--batch-size",
        "5",
        CELERY_BROKER_URL=AMQP_URL,
        CRONFLEET_QUEUE_HIGH_WATER="5",
        CRONFLEET_LOG_LEVEL="INFO",
    )
    wait_for(
        lambda: "backpressure: queues holding 5 messages or more" in processes.log("beat"),
        timeout=30,
        what="the beat to hold the queue back",
    )

    assert JobRun.objects.count() == 5  # the first batch; then the queue held 5
    assert Job.objects.filter(next_run_at=start).count() == 15
    processes.stop_all()
    assert "backpressure: could not read" not in processes.log("beat")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("high_water", [20, 0])
def test_a_spike_does_not_bury_the_next_tenants_fires_at_the_workers(high_water, processes, queue_name):
    """Tenant "spike" has 200 runs of 50 ms due at once; tenant "calm" has 10 due two seconds
    later, on the same queue. One worker with two processes drains about 40 runs a second.

    With backpressure (a high-water mark of 20) calm's fires are claimed as they fall due,
    ahead of spike's remaining due jobs (the fair claim), and wait behind at most ~20
    messages: most of spike's runs start after all of calm's. Without it (0) every spike
    message is in the queue before calm's (calm's fall due once the beat has recorded the
    whole spike), and calm's runs start last.
    """
    processes.worker(queue_name, concurrency=2)
    processes.beat("beat", "--max-sleep", "1", "--batch-size", "20", CRONFLEET_QUEUE_HIGH_WATER=str(high_water))
    wait_for(lambda: "runbeat: started" in processes.log("beat"), timeout=30, what="the beat to start")
    start = db_now() + timedelta(seconds=1)
    spike_jobs = one_offs(
        Tenant.objects.create(slug="spike", name="spike"),
        200,
        start,
        queue=queue_name,
        task_name="scheduler_app.sleep",
        kwargs={"seconds": 0.05},
    )
    calm_at = start + timedelta(seconds=2)
    if not high_water:
        # Without a mark the beat records the whole spike as fast as it claims it: ten turns
        # of 20, which a loaded machine can stretch past calm's time, and then the fair claim
        # takes calm's fires first. So calm's come due once the spike is all recorded.
        spike_runs = JobRun.objects.filter(job_id__in=spike_jobs)
        wait_for(lambda: spike_runs.count() == 200, timeout=60, what="the beat to record all of spike's runs")
        calm_at = db_now()
    calm_jobs = one_offs(Tenant.objects.create(slug="calm", name="calm"), 10, calm_at, queue=queue_name)

    wait_for(
        lambda: JobRun.objects.filter(state=RunState.SUCCEEDED).count() == 210,
        timeout=120,
        what="all 210 runs to succeed",
    )

    calm_last_start = max(JobRun.objects.filter(job_id__in=calm_jobs).values_list("started_at", flat=True))
    spike_after = JobRun.objects.filter(job_id__in=spike_jobs, started_at__gt=calm_last_start).count()
    calm_lag = max(run.started_at - run.scheduled_at for run in JobRun.objects.filter(job_id__in=calm_jobs))
    print(
        f"high water {high_water}: calm's worst start lag {calm_lag.total_seconds():.2f} s; "
        f"{spike_after} of spike's 200 runs started after calm's last"
    )
    if high_water:
        assert spike_after >= 50
    else:
        assert spike_after <= 5
