"""A node of a three-node RabbitMQ cluster lost: kill -9, with messages in flight, of the node
that leads the task queue (a quorum queue) and holds clients' connections; the other two keep
serving, the killed node is never restarted, and every fire still runs once (issue 28).

The cluster is the test's own (tests/support/servers/: private_rabbitmq_cluster, three nodes on free
ports, each with its data in a temporary directory, one Erlang cookie), never the machine's
RabbitMQ. Beats and workers are given every node in CELERY_BROKER_URL (kombu's failover list)
and CRONFLEET_RABBITMQ_QUEUE_TYPE=quorum: the queue is replicated on the three nodes, and two
of them are a majority, which elects a new leader.

What the kill costs: the killed node's connections (beats and workers reconnect to a node
that answers), the confirms of messages published and not yet confirmed (with publisher
confirms the beat's publish raises and the runs stay queued for the republish sweep;
without them the runs also wait for the sweep, having gone nowhere), and the acknowledgements
of runs that finished meanwhile, whose messages come back to a worker, which acknowledges
them without running (the start's compare-and-set).
"""

import time

import pytest
from django.test import override_settings
from kombu import Connection

from scheduler_app.models import JobRun, RunState, db_now
from tests.conftest import wait_for
from tests.faults.harness import OUTAGE_LAG_BOUND
from tests.faults.test_faults import WINDOW, assert_clean
from tests.faults.test_rabbitmq_node import BROKER_ERROR_LINE, IN_FLIGHT, beat_logs, duplicate_deliveries, waiting
from tests.support import servers

# Three nodes to start and join, then a kill and its recovery: on a loaded machine, set-up and
# scenario together outgrow the suite's bound per test (docs/benchmarks.md, the loaded rounds).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults, pytest.mark.timeout(600)]

RUN_ON = 10  # seconds of load after the kill, on the two nodes left


@pytest.fixture
def rabbitmq_cluster(cluster):
    """A RabbitMQ cluster of this test's own as the broker of the beats and workers the test
    starts, given as every node's URL. Taken after `cluster`, so the cluster's teardown (which
    empties the suite's Redis broker) sees the settings' own again."""
    if servers.rabbitmq_program() is None:
        pytest.skip(f"needs RabbitMQ's server script ({servers.RABBITMQ_SERVER}, or CRONFLEET_TEST_RABBITMQ_SERVER)")
    with servers.private_rabbitmq_cluster(nodes=3) as nodes, override_settings(CELERY_BROKER_URL=nodes.url()):
        yield nodes


def started_since(cluster, at) -> int:
    return JobRun.objects.filter(tenant=cluster.tenant, started_at__gte=at).count()


@pytest.mark.parametrize("confirms", ["true", "false"])
def test_the_quorum_queue_leader_killed_in_a_three_node_cluster_loses_no_fire(rabbitmq_cluster, cluster, confirms):
    env = {"CRONFLEET_RABBITMQ_QUEUE_TYPE": "quorum", "CRONFLEET_RABBITMQ_CONFIRM_PUBLISH": confirms}
    cluster.seed()
    cluster.start(**env)
    cluster.run_until(WINDOW / 2)

    leader_name = rabbitmq_cluster.leader(cluster.queue)
    victim = next(node for node in rabbitmq_cluster.nodes if node.name == leader_name)
    survivors = [node for node in rabbitmq_cluster.nodes if node is not victim]
    members = rabbitmq_cluster.ctl("list_queues", "--quiet", "name", "members")
    assert all(node.name in members for node in rabbitmq_cluster.nodes)  # replicated on all three
    # Mid-spike: a turn's batch published and not yet taken by the workers, which hold others
    # unacknowledged while they run them.
    running = JobRun.objects.filter(tenant=cluster.tenant, state=RunState.RUNNING)
    with Connection(survivors[0].url()) as conn:
        channel = conn.channel()
        ready = wait_for(
            lambda: (n := waiting(channel, cluster.queue)) >= IN_FLIGHT and running.exists() and n,
            timeout=30,
            interval=0.005,
            what=f"{IN_FLIGHT} messages waiting and a run running",
        )
    on_victim = rabbitmq_cluster.connections().get(victim.name, 0)
    assert on_victim > 0, "no client was connected to the queue's leader"
    running = running.count()
    killed_at, killed_db = time.monotonic(), db_now()
    victim.kill()
    wait_for(lambda: BROKER_ERROR_LINE in beat_logs(cluster), timeout=30, what="a beat to find its node gone")
    # Served again: a run started through the nodes left, once they have elected a new leader
    # and the workers have reconnected. Which node leads is asked of rabbitmqctl after the
    # load: while the two nodes elect leaders for every quorum queue, on a loaded machine a
    # listing of the queues outlasted the bound of its call.
    wait_for(
        lambda: started_since(cluster, killed_db) > 0, timeout=90, interval=0.2, what="a run started after the kill"
    )
    outage = time.monotonic() - killed_at
    cluster.run_until((db_now() - cluster.start_at).total_seconds() + RUN_ON)
    connections = rabbitmq_cluster.connections()
    started_after = started_since(cluster, killed_db)
    cluster.finish()
    new_leader = rabbitmq_cluster.leader(cluster.queue)

    assert not victim.running()
    assert new_leader in {node.name for node in survivors}  # elected by the two nodes left
    # Fires due until the workers are back wait for them; then the republish bound of a backlog applies (OUTAGE_LAG_BOUND).
    report = cluster.check(
        f"RabbitMQ cluster: quorum leader killed (confirms {confirms})",
        raw_duplicates_allowed=True,
        lag_bound=OUTAGE_LAG_BOUND + outage,
    )
    print(
        f"confirms {confirms}: {ready} messages waiting, {running} runs running and {on_victim} connections on the"
        f" leader {victim.name} at the kill; new leader {new_leader}, runs starting again after {outage:.1f} s;"
        f" connections after {connections};"
        f" runs started after the kill {started_after} ({time.monotonic() - killed_at:.1f} s, node never back);"
        f" expected {report.expected}, delivered {report.delivered}, lost {report.expected - report.delivered},"
        f" twice {report.raw_duplicates}, republished {report.republished}, duplicate deliveries not run"
        f" {duplicate_deliveries(cluster)}, p99 lag {report.percentile(0.99):.2f} s"
    )
    assert_clean(report)
    assert report.delivered == report.expected  # every fire ran
    assert report.raw_duplicates == 0  # and none started twice
    assert started_after > 0 and victim.name not in connections  # the two nodes left served on
