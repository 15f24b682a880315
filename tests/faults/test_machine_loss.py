"""The primary's machine lost from the network under load (issue 28): its packets dropped
without an answer, its standby promoted, and every beat and worker going on by itself.

tests/faults/test_failover.py kills the primary's processes: their kernel closes the sockets,
and every client hears of it at once. A machine that loses power, or its network, says
nothing: a client in the middle of a statement waits on TCP's retransmissions (about 15
minutes on Linux) unless it bounds them. Here the primary runs in a network namespace of its
own (tests/support/netns.py), joined to this host by a veth pair, and its end of the link is taken
down mid-load; the standby (on the loopback, streaming from it synchronously) is promoted
PROMOTE_AFTER seconds later. The processes run with the bounds of project/settings.py made
short, as the fault suite makes its others: DB_TCP_USER_TIMEOUT_MS (unacknowledged data),
DB_KEEPALIVES_IDLE (an idle connection) and DB_CONNECT_TIMEOUT (each host listed).
"""

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.faults.harness import RESTART_LAG_BOUND
from tests.faults.test_failover import PROMOTE_AFTER, through_a_failover
from tests.faults.test_faults import assert_clean
from tests.support import netns, servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]
DATABASE = "cronfleet"
BOUNDS = {"DB_TCP_USER_TIMEOUT_MS": "3000", "DB_KEEPALIVES_IDLE": "2", "DB_CONNECT_TIMEOUT": "2"}
# The lag bound of a restart (a republish after CRONFLEET_DISPATCH_TIMEOUT_SECONDS) plus what
# the loss adds before anyone may notice it: the TCP bound, a connect timeout, the promotion.
LOSS_LAG_BOUND = RESTART_LAG_BOUND + 3 + 2 + PROMOTE_AFTER


def server_in(box: netns.Machine, directory: Path) -> servers.PostgresServer:
    """A PostgreSQL cluster run inside `box`, listening on its address, trusting the host's."""
    server = servers.PostgresServer(servers.postgres_bindir(), directory, servers.free_port())
    server.host = box.address
    server.prefix = [*box.prefix, *servers.as_postgres_user()]
    server.init()
    with (server.data / "pg_hba.conf").open("a") as hba:  # the standby and the clients come over the link
        hba.write(f"host all all {box.host_address}/32 trust\nhost replication all {box.host_address}/32 trust\n")
    server.start()
    return server


@pytest.fixture
def lost_machine(transactional_db):
    """(the machine, its primary, the standby on the loopback, the processes' DATABASE_URL);
    this process's connection on both hosts too, with the same short bounds."""
    if servers.postgres_bindir() is None:
        pytest.skip("needs PostgreSQL's initdb, pg_ctl, postgres and pg_basebackup (CRONFLEET_TEST_PG_BINDIR)")
    if reason := netns.available():
        pytest.skip(reason)
    directories = [Path(tempfile.mkdtemp(prefix=f"cronfleet-pg-{role}-")) for role in ("primary", "standby")]
    try:
        with netns.machine() as box:
            primary = server_in(box, directories[0])
            standby = servers.PostgresServer(primary.bindir, directories[1], servers.free_port())
            try:
                standby.clone_of(primary)
                with (standby.data / "postgresql.conf").open("a") as conf:  # not the primary's address
                    conf.write(f"listen_addresses = '{standby.host}'\n")
                standby.start()
                primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                primary.execute("SELECT pg_reload_conf()")
                wait_for(
                    lambda: (
                        primary.fetch_one("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'")
                        == "sync"
                    ),
                    timeout=60,
                    what="the standby streaming (sync)",
                )
                primary.create_database(DATABASE)
                url = (
                    f"postgres://{primary.user}@{primary.host}:{primary.port},{standby.host}:{standby.port}/"
                    f"{DATABASE}?target_session_attrs=read-write"
                )
                options = {
                    "target_session_attrs": "read-write",
                    "tcp_user_timeout": 3000,
                    "connect_timeout": 2,
                    "keepalives_idle": 2,
                }
                with servers.database_on(
                    f"{primary.host},{standby.host}", f"{primary.port},{standby.port}", DATABASE, options=options
                ):
                    yield box, primary, standby, url
            finally:
                standby.stop()
                primary.stop()
    finally:
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)


def test_the_primary_machine_lost_from_the_network_and_its_standby_promoted(lost_machine, cluster):
    box, primary, standby, url = lost_machine
    cluster.seed()
    cluster.start(DATABASE_URL=url, **BOUNDS)

    promoted_at, stopped, after = through_a_failover(cluster, box.lose, standby, tail=15)

    report = cluster.check(
        f"the primary's machine lost, standby promoted {PROMOTE_AFTER:.0f} s later",
        raw_duplicates_allowed=True,
        lag_bound=LOSS_LAG_BOUND,
    )
    reconnect = (min(after) - promoted_at).total_seconds() if after else None
    print(
        f"\n| machine lost (sync) | {report.expected} | {report.delivered} | {sum(report.skipped.values())} | "
        f"{report.raw_duplicates} | first delivery {reconnect} s after the promotion | "
        f"p99 lag {report.percentile(0.99):.2f} |"
    )

    assert not stopped, f"{stopped} ended: every process must go on by itself"
    assert after, "no fire was delivered after the promotion"
    assert_clean(report)
