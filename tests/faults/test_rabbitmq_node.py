"""The broker's RabbitMQ node lost: kill -9 with messages in flight, then the node restarted on
its own disk; every fire still runs once (issue 28).

Each scenario runs a node of its own (tests/support/servers/: private_rabbitmq, on free ports, its
data in a temporary directory), never the machine's RabbitMQ: other test runs use that one.
Once with classic queues (the default: durable queues, persistent messages) and once with
quorum queues (CRONFLEET_RABBITMQ_QUEUE_TYPE=quorum).

What a kill costs: messages the beat sent that the node had not yet confirmed (with
publisher confirms, CRONFLEET_RABBITMQ_CONFIRM_PUBLISH, the default: the beat's publish raises
and the runs stay queued; without them such messages may be gone unseen), and the
acknowledgements of runs that finished while it was down, whose messages come back. The
first kind the ledger publishes again (runs queued and never started, after
CRONFLEET_DISPATCH_TIMEOUT_SECONDS, or the shorter idle bound when the queue is empty); the
second a worker acknowledges without running (the start's compare-and-set). A cluster of
three nodes losing one for good is tests/faults/test_rabbitmq_cluster.py.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.test import override_settings
from kombu import Connection, Queue

from scheduler_app.models import Job, JobRun, RunState, db_now
from scheduler_app.queues import EXECUTE_RUN, EXECUTE_RUNS
from tests.conftest import ROOT, environment_with, wait_for
from tests.faults.harness import OUTAGE_LAG_BOUND
from tests.faults.test_faults import WINDOW, assert_clean
from tests.support import servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]

QUEUE_TYPES = ["classic", "quorum"]
# How a queue of each type looks in `rabbitmqctl list_queues` (the same for beats and workers).
ARGUMENTS = {"classic": [["x-max-priority", "signedint", 9]], "quorum": [["x-queue-type", "longstr", "quorum"]]}
IN_FLIGHT = 5  # messages waiting in the queue, at least, when the node is killed
RUN_ON = 10  # seconds of load after the node is back
BROKER_ERROR_LINE = "beat turn failed"  # runbeat's warning when the broker went away mid-turn
DUPLICATE_LINE = "] ignored"  # Celery's "Task <name>[<id>] ignored"


@pytest.fixture
def rabbitmq(cluster):
    """A RabbitMQ node of this test's own as the broker of the beats and workers the test
    starts (they take CELERY_BROKER_URL from these settings). Taken after `cluster`, so the
    cluster's teardown (which empties the suite's Redis broker) sees the settings' own again."""
    if servers.rabbitmq_program() is None:
        pytest.skip(f"needs RabbitMQ's server script ({servers.RABBITMQ_SERVER}, or CRONFLEET_TEST_RABBITMQ_SERVER)")
    with servers.private_rabbitmq() as node, override_settings(CELERY_BROKER_URL=node.url()):
        yield node


def waiting(channel, queue: str) -> int:
    """Messages ready in `queue` (not those delivered and not yet acknowledged), which the
    workers declared when they started."""
    return channel.queue_declare(queue=queue, passive=True).message_count


def depth(node: servers.RabbitMQNode, queue: str) -> int:
    """Messages ready in `queue`, over a connection of its own (0 while the node cannot say)."""
    try:
        with Connection(node.url(), connect_timeout=2) as conn:
            return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
    except Exception:  # noqa: BLE001 - not there (yet): a queue being recovered, a node starting
        return 0


def beat_logs(cluster) -> str:
    return "".join(cluster.processes.log(name) for name in cluster.beats)


def duplicate_deliveries(cluster) -> int:
    """Deliveries the workers acknowledged without running (Celery logs the task as ignored)."""
    return sum(cluster.processes.log(name).count(DUPLICATE_LINE) for name in cluster.workers)


# --- the setting --------------------------------------------------------------------------


@pytest.mark.parametrize("program", ["runbeat", "worker"])
def test_a_queue_type_other_than_classic_or_quorum_stops_start_up(program):
    celery = Path(sys.executable).parent / "celery"  # project/celery.py reports settings errors under its name
    argv = (
        [sys.executable, "manage.py", "runbeat", "--once"]
        if program == "runbeat"
        else [str(celery), "-A", "project", "worker"]
    )
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=environment_with(CRONFLEET_RABBITMQ_QUEUE_TYPE="mirrored"),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"{'manage.py' if program == 'runbeat' else 'celery'}: CRONFLEET_RABBITMQ_QUEUE_TYPE must be one of classic, "
        "quorum, got 'mirrored'"
    ]


SHAPES = """
import json
import django
django.setup()
from project.celery import app
from scheduler_app.queues import task_queue

def shape(queue):
    exchange = queue.exchange
    return [queue.durable, queue.exclusive, queue.auto_delete, queue.queue_arguments, queue.routing_key,
            exchange.name, exchange.type, exchange.durable, exchange.auto_delete, exchange.arguments]

# What a worker declares for `-Q jobs-a` (Celery's queue for a name it was not configured
# with), and for the default queue; what a beat declares for each.
print(json.dumps([shape(app.amqp.queues["jobs-a"]), shape(task_queue("jobs-a")),
                  shape(app.amqp.queues["cronfleet"]), shape(task_queue("cronfleet"))]))
"""


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_beats_and_workers_declare_a_queue_alike(queue_type):
    """RabbitMQ refuses a declaration that differs from the queue's (PRECONDITION_FAILED):
    the beat's must be the worker's, argument for argument, for either queue type."""
    env = environment_with(
        CRONFLEET_RABBITMQ_QUEUE_TYPE=queue_type,
        CRONFLEET_DEFAULT_QUEUE="cronfleet",
        CELERY_BROKER_URL="amqp://guest:guest@127.0.0.1:1//",
    )  # never connected to
    done = subprocess.run([sys.executable, "-c", SHAPES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    worker, beat, worker_default, beat_default = json.loads(done.stdout)

    assert beat == worker and beat_default == worker_default
    assert beat[:3] == [True, False, False]  # durable, not exclusive, not auto-deleted
    expected = {"classic": {"x-max-priority": 9}, "quorum": {"x-queue-type": "quorum"}}[queue_type]
    assert beat[3] == expected


# --- durable queues, persistent messages ----------------------------------------------------


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_the_queues_are_durable_and_their_messages_survive_a_kill(rabbitmq, cluster, queue_type):
    """A beat publishes to a queue no worker consumes yet; the node is killed and restarted;
    the queue is there with every message, each persistent, and a worker then runs them all.
    Before the kill, a message published with a publisher confirm marks the moment the node
    has written what came before it (a confirm follows the write, in the queue's order)."""
    cluster.seed(count=10)
    beat = cluster.beat("beat0", CRONFLEET_RABBITMQ_QUEUE_TYPE=queue_type)
    cluster.run_until(3)
    Job.objects.filter(tenant=cluster.tenant).update(enabled=False)
    cluster.processes.stop(beat)  # after its turn: every run it recorded is published
    queued = JobRun.objects.filter(tenant=cluster.tenant, state=RunState.QUEUED).count()
    assert queued > 0
    wait_for(lambda: depth(rabbitmq, cluster.queue) == queued, timeout=30, what=f"{queued} messages in the queue")
    with Connection(rabbitmq.url(), transport_options={"confirm_publish": True}) as conn:
        conn.Producer().publish(
            {"marker": True},
            exchange="",
            routing_key=cluster.queue,
            delivery_mode=2,
            headers={"marker": "1"},
            serializer="json",
        )

    declared = rabbitmq.queues()[cluster.queue]
    assert declared["durable"] is True and declared["auto_delete"] is False and declared["exclusive"] in (False, "")
    assert declared["type"] == queue_type and declared["arguments"] == ARGUMENTS[queue_type]

    rabbitmq.kill()
    rabbitmq.start()

    # A quorum queue answers once its log is recovered: wait for the count to come back.
    wait_for(
        lambda: depth(rabbitmq, cluster.queue) == queued + 1,
        timeout=30,
        what=f"{queued} messages and the marker back in the queue after the restart",
    )
    assert rabbitmq.queues()[cluster.queue]["type"] == queue_type
    tasks, modes = [], []
    with Connection(rabbitmq.url()) as conn:
        channel = conn.channel()
        queue = Queue(cluster.queue, channel=channel, no_declare=True)
        for _ in range(queued + 1):
            message = queue.get(no_ack=False)
            modes.append(message.properties.get("delivery_mode"))
            if message.headers.get("marker"):
                message.ack()
            else:
                tasks.append(message.headers.get("task"))
        channel.close()  # the task messages, unacknowledged, go back to the queue
    print(f"\n{queue_type}: {queued} messages survived the kill, delivery modes {sorted(set(modes))}")
    assert modes == [2] * (queued + 1)
    assert len(tasks) == queued and set(tasks) <= {EXECUTE_RUN, EXECUTE_RUNS}

    cluster.worker("worker0", CRONFLEET_RABBITMQ_QUEUE_TYPE=queue_type)
    cluster.finish()
    # No lag bound: the runs wait on purpose, for the worker started last.
    report = cluster.check(f"RabbitMQ ({queue_type}) killed with every message at rest", lag_bound=float("inf"))
    assert_clean(report)
    assert report.delivered == queued and report.republished == 0  # every run from its first message


# --- the node killed under load -------------------------------------------------------------


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_the_rabbitmq_node_killed_with_messages_in_flight_loses_no_fire(rabbitmq, cluster, queue_type):
    cluster.seed()
    cluster.start(CRONFLEET_RABBITMQ_QUEUE_TYPE=queue_type)
    cluster.run_until(WINDOW / 2)

    # Mid-spike: a turn's batch published and not yet taken by the workers, which hold others
    # unacknowledged while they run them.
    running = JobRun.objects.filter(tenant=cluster.tenant, state=RunState.RUNNING)
    with Connection(rabbitmq.url()) as conn:
        channel = conn.channel()
        ready = wait_for(
            lambda: (n := waiting(channel, cluster.queue)) >= IN_FLIGHT and running.exists() and n,
            timeout=30,
            interval=0.005,
            what=f"{IN_FLIGHT} messages waiting and a run running",
        )
    running = running.count()
    killed_at = time.monotonic()
    rabbitmq.kill()
    wait_for(lambda: BROKER_ERROR_LINE in beat_logs(cluster), timeout=30, what="a beat to find the broker gone")
    rabbitmq.start()
    outage = time.monotonic() - killed_at
    cluster.run_until((db_now() - cluster.start_at).total_seconds() + RUN_ON)
    cluster.finish()

    # Fires due while the node was away wait for it; then the republish bound of a backlog applies (OUTAGE_LAG_BOUND).
    report = cluster.check(
        f"RabbitMQ node ({queue_type}) killed with messages in flight",
        raw_duplicates_allowed=True,
        lag_bound=OUTAGE_LAG_BOUND + outage,
    )
    print(
        f"{queue_type}: {ready} messages waiting and {running} runs running just before the kill; node away {outage:.1f} s;"
        f" expected {report.expected}, delivered {report.delivered}, lost {report.expected - report.delivered},"
        f" twice {report.raw_duplicates}, republished {report.republished}, duplicate deliveries not run"
        f" {duplicate_deliveries(cluster)}, p99 lag {report.percentile(0.99):.2f} s"
    )
    assert_clean(report)
    assert report.delivered == report.expected  # no skips here: every fire ran
    assert report.republished > 0  # the fires of the outage (and messages the kill lost) went out again
