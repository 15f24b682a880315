"""Private RabbitMQ nodes, alone or joined into a cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kombu import Connection

from tests.conftest import wait_for
from tests.support.servers.common import (
    HOST,
    START_TIMEOUT,
    ServerError,
    descendants_of,
    free_port,
    log_tail,
    pid_alive,
    run,
)

# The Debian package's server script. /usr/sbin/rabbitmq-server wraps it to switch to the
# rabbitmq user, whose node is the machine's own; a node of the test's own runs as this process.
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQ_USER = "guest"  # RabbitMQ's default user: it may log in from the loopback only
RABBITMQ_STOP_TIMEOUT = 30  # seconds for a node to shut down on SIGTERM before it is killed
# The bound of one rabbitmqctl call, to catch a hang: each call boots an Erlang VM of its own,
# which on a loaded machine takes seconds, and a listing of a cluster's queues while its nodes
# elect leaders took longer than a minute.
RABBITMQCTL_TIMEOUT = 180


def rabbitmq_program() -> Path | None:
    """RabbitMQ's server script: CRONFLEET_TEST_RABBITMQ_SERVER, else RABBITMQ_SERVER; None
    when it is not installed."""
    program = Path(os.environ.get("CRONFLEET_TEST_RABBITMQ_SERVER") or RABBITMQ_SERVER)
    return program if program.is_file() else None


class RabbitMQNode:
    """A RabbitMQ node of one test's own: named cf-<random>@localhost, with its data (Mnesia,
    message stores, quorum queues' logs), logs, configuration and Erlang cookie (HOME) in
    `directory`, AMQP on `port` on the loopback, Erlang distribution on `dist_port`, and no
    plugins. Its data outlives kill() and stop(), so start() again is a restart on the same
    disk, as a node restarted on its host is."""

    host = HOST

    def __init__(self, program: Path, directory: Path, port: int, dist_port: int) -> None:
        self.program = program
        self.directory = directory
        self.port = port
        self.dist_port = dist_port
        self.name = f"cf-{uuid.uuid4().hex[:8]}@localhost"
        self.log = directory / "rabbitmq.out"  # the node's console; its own log is in log/
        self.proc: subprocess.Popen | None = None
        for sub in ("mnesia", "log"):
            (directory / sub).mkdir()
        (directory / "enabled_plugins").write_text("[].\n")  # not even the management plugin
        (directory / "rabbitmq.conf").write_text("loopback_users.guest = true\n")

    def environment(self) -> dict[str, str]:
        """The node's (and its command-line tools') environment: every file in the directory."""
        return {
            **os.environ,
            "HOME": str(self.directory),  # the Erlang cookie: $HOME/.erlang.cookie, made at first start
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": self.host,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.directory / "node.pid"),
        }

    def url(self) -> str:
        return f"amqp://{RABBITMQ_USER}:{RABBITMQ_USER}@{self.host}:{self.port}//"

    def answers(self) -> bool:
        """Whether an AMQP connection to the port works and reaches this node (not another
        server that had taken the port)."""
        try:
            with Connection(self.url(), connect_timeout=2) as conn:
                conn.ensure_connection(max_retries=1)
                # The cluster's name is the node's, with the host's own name after the "@".
                cluster = conn.connection.server_properties.get("cluster_name", "")
                return cluster.split("@")[0] == self.name.split("@")[0]
        except Exception:  # noqa: BLE001 - not up yet, whatever the library says
            return False

    def start(self) -> None:
        """Start the node (again, after kill() or stop(): same name, ports and data) and wait
        until it takes AMQP connections."""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.program)],
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
            )
        wait_for(
            lambda: self.proc.poll() is not None or self.answers(),
            timeout=START_TIMEOUT,
            interval=0.2,
            what=f"RabbitMQ node {self.name} on port {self.port}",
        )
        if self.proc.poll() is not None:
            raise ServerError(f"RabbitMQ node {self.name} exited with {self.proc.returncode}\n{log_tail(self.log)}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """The host's loss, as far as one host can show it: SIGKILL to the server script, the
        Erlang VM (beam.smp) and its helpers at once, so nothing of the node answers, acks or
        writes again; returns once they are gone. epmd, shared with other nodes, stays."""
        assert self.running(), "the node is not running"
        victims = [self.proc.pid, *descendants_of(self.proc.pid)]
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(victim, signal.SIGKILL)
        self.proc.wait(timeout=10)
        wait_for(
            lambda: not any(pid_alive(pid) for pid in victims),
            timeout=10,
            what="the killed node's processes to be gone",
        )

    def stop(self) -> None:
        """Shut the node down (SIGTERM: the Erlang VM stops cleanly), killing it if it takes
        longer than RABBITMQ_STOP_TIMEOUT. A node already gone is left."""
        if not self.running():
            return
        beam = descendants_of(self.proc.pid)
        for victim in [self.proc.pid, *beam]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGTERM)
        try:
            self.proc.wait(timeout=RABBITMQ_STOP_TIMEOUT)
            wait_for(
                lambda: not any(pid_alive(pid) for pid in beam),
                timeout=RABBITMQ_STOP_TIMEOUT,
                what="the node's processes to end",
            )
        except (subprocess.TimeoutExpired, AssertionError):
            for victim in [self.proc.pid, *descendants_of(self.proc.pid), *beam]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def ctl(self, *args: str, program: str = "rabbitmqctl") -> str:
        """The output of `rabbitmqctl -n <node> <args>` (or another of RabbitMQ's command-line
        programs, such as rabbitmq-queues), run with the node's cookie."""
        env = {key: value for key, value in self.environment().items() if key != "RABBITMQ_DIST_PORT"}
        return run(
            [str(self.program.parent / program), "-n", self.name, *args],
            log=self.log,
            what=program,
            timeout=RABBITMQCTL_TIMEOUT,
            env=env,
            cwd=self.directory,
        ).stdout

    def queues(self) -> dict[str, dict]:
        """Each queue of the node's default virtual host, by name: durable, auto_delete,
        exclusive, type, arguments and messages, as rabbitmqctl list_queues reports them."""
        columns = ("name", "durable", "auto_delete", "exclusive", "type", "arguments", "messages")
        listed = json.loads(self.ctl("list_queues", "--quiet", "--formatter", "json", *columns))
        return {queue["name"]: queue for queue in listed}


@contextlib.contextmanager
def private_rabbitmq() -> Iterator[RabbitMQNode]:
    """A started private RabbitMQ node on free ports, stopped and its directory deleted on
    leaving (whether it runs then, or was killed)."""
    program = rabbitmq_program()
    if program is None:
        raise ServerError(
            f"RabbitMQ's server script was not found at {RABBITMQ_SERVER} (set CRONFLEET_TEST_RABBITMQ_SERVER)"
        )
    directory = Path(tempfile.mkdtemp(prefix="cronfleet-rabbitmq-"))
    try:
        node = RabbitMQNode(program, directory, free_port(), free_port())
        try:
            node.start()
            yield node
        finally:
            node.stop()
    finally:
        shutil.rmtree(directory)


class RabbitMQCluster:
    """RabbitMQ nodes of one test's own joined into one cluster: each a RabbitMQNode (its own
    name, ports and directory), all with one Erlang cookie, the second and later joined to the
    first (`rabbitmqctl stop_app`, `join_cluster`, `start_app`)."""

    def __init__(self, nodes: list[RabbitMQNode]) -> None:
        self.nodes = nodes

    def url(self) -> str:
        """Every node's URL, `;`-separated: kombu's failover list (clients take the first that
        answers, and the next on losing it)."""
        return ";".join(node.url() for node in self.nodes)

    def running(self) -> list[RabbitMQNode]:
        return [node for node in self.nodes if node.running()]

    def ctl(self, *args: str, program: str = "rabbitmqctl") -> str:
        """rabbitmqctl on the first node still running (the cluster answers for all of them)."""
        return self.running()[0].ctl(*args, program=program)

    def members(self) -> list[str]:
        """The names of the nodes the cluster reports running."""
        return json.loads(self.ctl("cluster_status", "--formatter", "json"))["running_nodes"]

    def connections(self) -> dict[str, int]:
        """AMQP client connections, by the name of the node that holds them."""
        # A connection's name is "client address:port -> node address:port": the node's AMQP port.
        listed = json.loads(self.ctl("list_connections", "--quiet", "--formatter", "json", "name"))
        counts: dict[str, int] = {}
        for connection in listed:
            port = int(connection["name"].rsplit(":", 1)[1])
            node = next((node.name for node in self.nodes if node.port == port), "?")
            counts[node] = counts.get(node, 0) + 1
        return counts

    def leader(self, queue: str) -> str:
        """The node that leads quorum queue `queue` ('' while none does), from the queue's own
        Raft members (`rabbitmq-queues quorum_status`), not from a listing of every queue."""
        members = json.loads(self.ctl("quorum_status", queue, "--formatter", "json", program="rabbitmq-queues"))
        return next((m["Node Name"] for m in members if m.get("Raft State") == "leader"), "")


@contextlib.contextmanager
def private_rabbitmq_cluster(nodes: int = 3) -> Iterator[RabbitMQCluster]:
    """A started private RabbitMQ cluster of `nodes` nodes on free ports, every node stopped and
    its directory deleted on leaving (whether it runs then, or was killed)."""
    program = rabbitmq_program()
    if program is None:
        raise ServerError(
            f"RabbitMQ's server script was not found at {RABBITMQ_SERVER} (set CRONFLEET_TEST_RABBITMQ_SERVER)"
        )
    cookie = uuid.uuid4().hex.upper()
    directories = [Path(tempfile.mkdtemp(prefix=f"cronfleet-rabbitmq{i}-")) for i in range(nodes)]
    members: list[RabbitMQNode] = []
    try:
        for directory in directories:
            node = RabbitMQNode(program, directory, free_port(), free_port())
            # The cookie the node and its rabbitmqctl read ($HOME/.erlang.cookie): one for all,
            # so they may talk to each other. Erlang refuses a cookie others may read.
            path = directory / ".erlang.cookie"
            path.write_text(cookie)
            path.chmod(0o400)
            # A quorum queue's first leader is the node its declaring client is connected to
            # (RabbitMQ 3.10 spreads them otherwise): with every client on the first node,
            # losing that node loses the clients' connections and the leader at once.
            with (directory / "rabbitmq.conf").open("a") as conf:
                conf.write("queue_leader_locator = client-local\n")
            members.append(node)
        # Started side by side (each Erlang VM takes seconds to boot), then joined one by one.
        with ThreadPoolExecutor(max_workers=nodes) as pool:
            for started in [pool.submit(node.start) for node in members]:
                started.result()
        first = members[0]
        for node in members[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", first.name)
            node.ctl("start_app")
        cluster = RabbitMQCluster(members)
        wait_for(
            lambda: sorted(cluster.members()) == sorted(node.name for node in members),
            timeout=START_TIMEOUT,
            interval=0.5,
            what=f"{nodes} RabbitMQ nodes running in one cluster",
        )
        yield cluster
    finally:
        for node in members:
            node.stop()
        for directory in directories:
            shutil.rmtree(directory)
