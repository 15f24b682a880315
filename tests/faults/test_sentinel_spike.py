"""The broker's Redis master lost mid-spike: Redis Sentinel promotes its replica, and the beat,
the workers, the web's queue-depth reads, the API rate limits and the admin login throttle
follow it through CELERY_BROKER_URL=sentinel://... and CRONFLEET_SENTINEL_MASTER (issue 28).

A master, a replica (--replicaof) and a Sentinel of this test's own (tests/support/servers/:
private_sentinel, quorum 1, down after 1 s) on free ports. A spike of SPIKE jobs is made due at
once on top of the fault suite's steady load, and once the broker holds at least
SPIKE_QUEUED_AT_KILL of their messages the master is SIGKILLed. Replication is asynchronous:
what the replica had not yet received is lost with the master, and so are the messages the
workers had taken but not acknowledged (kombu's unacked copies come back only after the
visibility timeout). The ledger is the outbox: each such run is still queued in it, and a
beat's sweep publishes it again (CRONFLEET_REPUBLISH_IDLE_SECONDS, or
CRONFLEET_DISPATCH_TIMEOUT_SECONDS behind a queue that is not empty). The checker asserts every
fire delivered, none twice at one attempt, nothing left unfinished, and the processes alive.

Each worker must outlive the loss and reconnect without a restart. With kombu 5.7.0 alone, 7 of
16 runs failed: in 5 a worker stopped on AttributeError("'NoneType' object has no attribute
'hostname'") from the close of the lost connection, in 2 an ack that met the dead master logged
a traceback. The worker's guard on kombu's Redis acks (scheduler_app/worker/redisacks.py;
test_sentinel.py tests it alone, where it fails every time without the guard) makes each of
those one line. Measured figures: docs/operating.md (Redis Sentinel).
"""

import pytest

from scheduler_app.models import Job, db_now
from scheduler_app.worker.redisacks import COMES_BACK
from tests.conftest import wait_for
from tests.faults.harness import RESTART_LAG_BOUND
from tests.faults.test_faults import WINDOW, assert_clean
from tests.faults.test_sentinel import depths_through_sentinel, queued, sentinel  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]
SPIKE = 300  # jobs made due in the same second, mid-load
SPIKE_HOLD = 0.05  # seconds each spike fire spends in its target, so the spike waits in the broker a while
SPIKE_QUEUED_AT_KILL = 50  # the master is killed once at least this many messages wait in it
# What a worker logs when its broker connection breaks (Celery's warning).
BROKER_LOST = "Connection to broker lost"


def make_spike(cluster) -> None:
    """SPIKE jobs due now, each firing once within the test (hourly)."""
    now = db_now().replace(microsecond=0)
    Job.objects.bulk_create(
        Job(
            tenant=cluster.tenant,
            name=f"spike-{i}",
            task_name="faults.deliver",
            every_seconds=3600,
            anchor_at=now,
            next_run_at=now,
            queue=cluster.queue,
            kwargs={"url": cluster.receiver.url, "hold": SPIKE_HOLD},
            max_attempts=5,
            retry_backoff_seconds=1,
        )
        for i in range(SPIKE)
    )


def test_the_broker_master_killed_mid_spike_and_its_replica_promoted(sentinel, cluster):
    cluster.seed()
    cluster.start(beats=1, workers=2)

    cluster.run_until(WINDOW / 2)
    make_spike(cluster)
    at_kill = wait_for(
        lambda: (n := queued(sentinel.master, cluster.queue)) >= SPIKE_QUEUED_AT_KILL and n,
        timeout=20,
        interval=0.01,
        what=f"{SPIKE_QUEUED_AT_KILL} messages waiting in the master",
    )
    on_replica = queued(sentinel.replica, cluster.queue)
    sentinel.master.kill()
    failover_seconds = sentinel.wait_for_failover()
    cluster.run_until(WINDOW + 10)
    stopped = [name for name, proc in {**cluster.beats, **cluster.workers}.items() if proc.poll() is not None]
    cluster.finish()
    logs = {name: cluster.processes.log(name) for name in [*cluster.beats, *cluster.workers]}
    left_in_broker = depths_through_sentinel(cluster.queue)

    report = cluster.check(
        "broker master killed mid-spike, replica promoted by Sentinel",
        raw_duplicates_allowed=True,
        lag_bound=RESTART_LAG_BOUND,
    )
    twice = sum("the same attempt delivered twice" in problem for problem in report.problems)
    guarded = sum(logs[name].count(COMES_BACK) for name in cluster.workers)  # the guard's lines
    print(
        f"\n| sentinel failover | queued at the kill {at_kill} (replica {on_replica}) | promoted after "
        f"{failover_seconds:.1f} s | expected {report.expected} | delivered {report.delivered} | "
        f"lost {report.expected - report.delivered - sum(report.skipped.values())} | twice at one attempt {twice} | "
        f"redelivered as a later attempt {report.raw_duplicates} | republished {report.republished} | "
        f"p99 lag {report.percentile(0.99):.2f} s | left in the broker {left_in_broker} | guard lines {guarded} |"
    )

    assert not stopped, f"{stopped} ended: every process must reconnect through the Sentinel by itself"
    # The outage is expected: each process says what it cost in lines, not tracebacks (a
    # worker: "consumer: Connection to broker lost. Trying to re-establish the connection...").
    tracebacks = {name: log.count("Traceback") for name, log in logs.items()}
    assert not any(tracebacks.values()), tracebacks
    assert all(BROKER_LOST in logs[name] for name in cluster.workers), "a worker did not notice the loss"
    assert_clean(report)
    assert report.expected >= SPIKE and twice == 0
    assert left_in_broker == 0
