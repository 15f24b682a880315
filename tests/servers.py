"""Private PostgreSQL and Redis servers for the tests that restart or shut down their server.

Restarting the machine's shared servers breaks every other test run using them at the same
time (a developer's run and CI, or parallel sessions with their own databases and Redis db
numbers). A scenario that restarts a server therefore starts one of its own, on a free
loopback port, in a temporary directory removed afterwards:

    with private_postgres() as server, database_on(server.host, server.port, "cronfleet"):
        ...  # this process's Django connection (and the processes it starts) use it
        server.restart_immediately()

    with private_redis() as server:
        ...  # point the broker at server.url(), then server.restart_without_persistence()

    with private_sentinel() as group:
        ...  # point the broker at group.url(), then group.master.kill(), group.wait_for_failover()

    with private_rabbitmq() as node:
        ...  # point the broker at node.url(), then node.kill() and node.start() on the same data

    with private_rabbitmq_cluster(nodes=3) as cluster:
        ...  # point the broker at cluster.url() (every node, for failover), then cluster.nodes[0].kill()

PostgreSQL's binaries are found in CRONFLEET_TEST_PG_BINDIR, else `pg_config --bindir`, else
on PATH; redis-server on PATH; RabbitMQ's server script in CRONFLEET_TEST_RABBITMQ_SERVER, else
where the Debian package puts it. A server that fails to start raises with its log's tail.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import redis
from kombu import Connection

from tests.conftest import wait_for

HOST = "127.0.0.1"
POSTGRES_PROGRAMS = ("initdb", "pg_ctl", "postgres", "pg_basebackup")
POSTGRES_OS_USER = "postgres"  # initdb and postgres refuse to run as root: as root, run them as this user
START_TIMEOUT = 60  # seconds for a server to answer after it is started
LOG_TAIL_LINES = 40


class ServerError(RuntimeError):
    """A private server did not start, restart or stop; the message ends with its log's tail."""


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now (the kernel's pick).
    Another program could take it before the server binds it; the server then fails to
    start and says so, which is rare enough not to retry."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def process_states() -> dict[int, tuple[str, int]]:
    """Every process's (state, parent pid), from /proc."""
    states = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue  # gone meanwhile
        states[int(stat.parent.name)] = (state, int(parent))
    return states


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid`: not those that have exited (zombies until
    their parent reaps them)."""
    return [child for child, (state, parent) in process_states().items() if parent == pid and state != "Z"]


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped, does not)."""
    state = process_states().get(pid)
    return state is not None and state[0] != "Z"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The end of a server's log, for the error that says why it did not start."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run(argv: list[str], *, log: Path, what: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Run a server's control program; on failure raise with its output and the server's log."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=timeout, **kwargs)
    except subprocess.CalledProcessError as exc:
        raise ServerError(f"{what} failed ({' '.join(argv)}): {exc.stdout}{exc.stderr}\n{log_tail(log)}") from None
    except subprocess.TimeoutExpired:
        raise ServerError(f"{what} did not finish within {timeout}s ({' '.join(argv)})\n{log_tail(log)}") from None


# --- PostgreSQL ---------------------------------------------------------------------------


def postgres_bindir() -> Path | None:
    """Where initdb, pg_ctl and postgres are: CRONFLEET_TEST_PG_BINDIR, else `pg_config
    --bindir` (Debian keeps them out of PATH, in the server version's own directory), else
    PATH. None when they are not installed."""
    candidates = []
    if os.environ.get("CRONFLEET_TEST_PG_BINDIR"):
        candidates.append(Path(os.environ["CRONFLEET_TEST_PG_BINDIR"]))
    if shutil.which("pg_config"):
        bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        candidates.append(Path(bindir))
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).parent)
    for bindir in candidates:
        if all((bindir / program).is_file() for program in POSTGRES_PROGRAMS):
            return bindir
    return None


def as_postgres_user() -> list[str]:
    """The prefix that runs PostgreSQL's programs as a user they accept: none, unless this
    process is root (initdb and postgres refuse root), then runuser to POSTGRES_OS_USER."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ServerError(f"running as root, PostgreSQL must run as {POSTGRES_OS_USER!r}, and runuser is not installed")
    return [runuser, "-u", POSTGRES_OS_USER, "--"]


class PostgresServer:
    """A PostgreSQL cluster of one test's own: initdb'd into `directory` (which also holds
    its socket and log), listening on `port` on the loopback, trusting every local user."""

    user = "postgres"
    host = HOST

    def __init__(self, bindir: Path, directory: Path, port: int) -> None:
        self.bindir = bindir
        self.directory = directory
        self.port = port
        self.data = directory / "data"
        self.log = directory / "postgres.log"
        self.prefix = as_postgres_user()

    def program(self, name: str, *args: str, what: str, timeout: float = 120) -> None:
        run([*self.prefix, str(self.bindir / name), *args], log=self.log, what=what, timeout=timeout,
            cwd=self.directory)  # the postgres user may not be able to enter this process's directory

    def init(self) -> None:
        """initdb, then the settings every start (and pg_ctl restart) uses: this port, the
        loopback only, the socket in the private directory, and no fsync or full-page writes
        (they guard against the machine crashing; an immediate restart only kills the
        server's processes, and what they wrote is in the OS's cache). synchronous_commit
        stays on: with it off, an immediate restart loses commits already acknowledged to
        their clients, a different fault, which the scenario reports as fires delivered twice."""
        if self.prefix:
            owner = pwd.getpwnam(POSTGRES_OS_USER)
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
        self.program("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8", "--no-locale",
                     "--no-sync", what="initdb")
        settings = {
            "listen_addresses": f"'{self.host}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.directory}'",
            "fsync": "off",
            "full_page_writes": "off",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("".join(f"{name} = {value}\n" for name, value in settings.items()))

    def start(self) -> None:
        self.program("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(START_TIMEOUT), "start",
                     what="starting PostgreSQL")

    def stop(self) -> None:
        """Stop at once: nothing on this server is kept. A server already gone (killed) is left."""
        if self.postmaster_pid() is not None:
            self.program("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", what="stopping PostgreSQL")

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid (from postmaster.pid), or None when none runs."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def kill(self) -> None:
        """The machine's loss, as far as one host can show it: SIGKILL to the postmaster and
        to every backend at once, so no process of the server answers or writes again."""
        pid = self.postmaster_pid()
        assert pid is not None, "the server is not running"
        for victim in [pid, *children_of(pid)]:
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid), timeout=10, what="the killed postmaster to be gone")
        (self.data / "postmaster.pid").unlink(missing_ok=True)  # a killed postmaster leaves it behind

    def clone_of(self, primary: PostgresServer) -> None:
        """A streaming standby of `primary` (pg_basebackup -R), on this server's own port and
        socket directory; start() starts it in recovery."""
        if self.prefix:
            owner = pwd.getpwnam(POSTGRES_OS_USER)
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
        self.program("pg_basebackup", "-h", primary.host, "-p", str(primary.port), "-U", primary.user,
                      "-D", str(self.data), "-R", "-X", "stream", "--no-sync", what="pg_basebackup")
        with (self.data / "postgresql.conf").open("a") as conf:  # later lines win over the primary's
            conf.write(f"port = {self.port}\nunix_socket_directories = '{self.directory}'\n")

    def promote(self) -> None:
        """End recovery: the standby becomes a primary that takes writes (pg_ctl -w waits)."""
        self.program("pg_ctl", "-D", str(self.data), "-w", "-t", str(START_TIMEOUT), "promote",
                     what="promoting the standby")

    def restart_immediately(self) -> None:
        """The crash the scenario is about: every backend killed without a checkpoint, then
        crash recovery on start. pg_ctl -w returns once the server accepts connections."""
        self.program("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "immediate", "-w",
                     "-t", str(START_TIMEOUT), "restart", what="restarting PostgreSQL (immediate)")

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname} connect_timeout=5"

    def create_database(self, name: str) -> None:
        self.execute(f'CREATE DATABASE "{name}"')

    def execute(self, statement: str, dbname: str = "postgres") -> None:
        with psycopg.connect(self.conninfo(dbname), autocommit=True) as conn:
            conn.execute(statement)

    def fetch_one(self, query: str, dbname: str = "postgres"):
        """The first column of the query's first row, or None when it has no row."""
        with psycopg.connect(self.conninfo(dbname), autocommit=True) as conn:
            row = conn.execute(query).fetchone()
        return row[0] if row else None


@contextlib.contextmanager
def private_postgres() -> Iterator[PostgresServer]:
    """A started private PostgreSQL cluster, stopped and deleted on leaving."""
    bindir = postgres_bindir()
    if bindir is None:
        raise ServerError(f"PostgreSQL's {', '.join(POSTGRES_PROGRAMS)} were not found "
                          "(set CRONFLEET_TEST_PG_BINDIR, or put pg_config on PATH)")
    directory = Path(tempfile.mkdtemp(prefix="cronfleet-pg-"))
    try:
        server = PostgresServer(bindir, directory, free_port())
        server.init()
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(directory)


@contextlib.contextmanager
def replicated_postgres(*, synchronous: bool) -> Iterator[tuple[PostgresServer, PostgresServer]]:
    """A private primary and a streaming standby of it, on free ports; with `synchronous`,
    a commit returns only once the standby has it (synchronous_standby_names = '*')."""
    with private_postgres() as primary:
        directory = Path(tempfile.mkdtemp(prefix="cronfleet-pg-standby-"))
        try:
            standby = PostgresServer(primary.bindir, directory, free_port())
            standby.clone_of(primary)
            standby.start()
            try:
                if synchronous:
                    primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                    primary.execute("SELECT pg_reload_conf()")
                wanted = "sync" if synchronous else "async"
                wait_for(lambda: primary.fetch_one("SELECT sync_state FROM pg_stat_replication"
                                                     " WHERE state = 'streaming'") == wanted,
                           timeout=START_TIMEOUT, what=f"the standby streaming ({wanted})")
                yield primary, standby
            finally:
                standby.stop()
        finally:
            shutil.rmtree(directory)


@contextlib.contextmanager
def database_on(host: str, port: int | str, name: str, *, migrate: bool = True,
                options: dict[str, str] | None = None) -> Iterator[None]:
    """Point this process's default Django connection (and so the beats and workers the
    `processes` fixture starts, which read it) at database `name` on host:port, migrated
    first; restore the previous settings on leaving. The connection is closed at each switch,
    so the next query connects to the database now configured."""
    from django.contrib.contenttypes.models import ContentType
    from django.core.management import call_command
    from django.db import connection

    saved = {key: connection.settings_dict[key] for key in ("HOST", "PORT", "NAME", "OPTIONS")}
    connection.close()
    connection.settings_dict.update(HOST=host, PORT=str(port), NAME=name,
                                    OPTIONS={**saved["OPTIONS"], **(options or {})})
    ContentType.objects.clear_cache()  # ids cached from the other database
    try:
        if migrate:
            call_command("migrate", verbosity=0, interactive=False)
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)
        ContentType.objects.clear_cache()


# --- Redis --------------------------------------------------------------------------------


def redis_answers(client: redis.Redis, pid: int) -> bool:
    """Whether the Redis at the client's address is up and is process `pid` (not some other
    server that had taken the port)."""
    try:
        return client.info("server")["process_id"] == pid
    except (redis.ConnectionError, redis.TimeoutError):
        return False


def spawn_redis(server, argv: list[str], what: str) -> None:
    """Start `argv` (a redis-server, or one in Sentinel mode) as `server`'s process, logging to
    its log, and wait until it answers on its port or exits."""
    with server.log.open("ab") as log:
        server.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=server.directory,
                                       start_new_session=True)
    client = server.client()
    try:
        wait_for(lambda: server.proc.poll() is not None or redis_answers(client, server.proc.pid),
                 timeout=START_TIMEOUT, interval=0.05, what=f"{what} on port {server.port}")
    finally:
        client.close()
    if server.proc.poll() is not None:
        raise ServerError(f"{what} exited with {server.proc.returncode}\n{log_tail(server.log)}")


class RedisServer:
    """A redis-server child process of one test's own on `port`, without persistence (no RDB
    snapshots, no AOF), so a restart starts empty, as a crashed broker without disk would."""

    host = HOST

    def __init__(self, program: str, directory: Path, port: int, *args: str) -> None:
        self.program = program
        self.directory = directory
        self.port = port
        self.args = args  # more options for redis-server (--replicaof host port)
        self.log = directory / "redis.log"
        self.proc: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, socket_connect_timeout=2, socket_timeout=5)

    def start(self) -> None:
        argv = [self.program, "--port", str(self.port), "--bind", self.host, "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--dir", str(self.directory), *self.args]
        spawn_redis(self, argv, "redis-server")

    def shutdown_nosave(self) -> None:
        """SHUTDOWN NOSAVE, and wait for the process to exit (so the port is free again)."""
        client = self.client()
        try:
            client.shutdown(nosave=True)
        finally:
            client.close()
        try:
            self.proc.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ServerError(f"redis-server did not exit after SHUTDOWN NOSAVE\n{log_tail(self.log)}") from None

    def restart_without_persistence(self) -> None:
        """The broker's crash the scenario is about: everything in memory lost, then the
        server back on the same port (clients reconnect to the address they know)."""
        self.shutdown_nosave()
        self.start()

    def kill(self) -> None:
        """The machine's loss: SIGKILL, no goodbye to clients or replicas; returns once it is gone."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@contextlib.contextmanager
def private_redis() -> Iterator[RedisServer]:
    """A started private redis-server, stopped and its directory deleted on leaving."""
    program = shutil.which("redis-server")
    if program is None:
        raise ServerError("redis-server was not found on PATH")
    directory = Path(tempfile.mkdtemp(prefix="cronfleet-redis-"))
    try:
        server = RedisServer(program, directory, free_port())
        try:
            server.start()
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(directory)


# --- Redis Sentinel -----------------------------------------------------------------------

SENTINEL_MASTER = "mymaster"
SENTINEL_DOWN_AFTER_MS = 1000  # a master not answering this long is down (for a Sentinel)
SENTINEL_FAILOVER_TIMEOUT_MS = 5000


class SentinelServer(RedisServer):
    """A redis-server in Sentinel mode (`redis-server <conf> --sentinel`), monitoring one
    master with quorum 1; the conf file is its own (a Sentinel rewrites it)."""

    def __init__(self, program: str, directory: Path, port: int, master: RedisServer) -> None:
        super().__init__(program, directory, port)
        self.conf = directory / "sentinel.conf"
        self.conf.write_text("\n".join([
            f"port {port}", f"bind {self.host}", f"dir {directory}", "protected-mode no",
            f"sentinel monitor {SENTINEL_MASTER} {master.host} {master.port} 1",
            f"sentinel down-after-milliseconds {SENTINEL_MASTER} {SENTINEL_DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SENTINEL_MASTER} {SENTINEL_FAILOVER_TIMEOUT_MS}",
            "",
        ]))

    def start(self) -> None:
        spawn_redis(self, [self.program, str(self.conf), "--sentinel"], "redis-server --sentinel")

    def ask(self, question):
        """`question(client)` of this Sentinel, or None when it cannot answer now."""
        client = self.client()
        try:
            return question(client)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return None
        finally:
            client.close()

    def master_port(self) -> int | None:
        """The port of the master this Sentinel names now (None when it cannot say)."""
        address = self.ask(lambda client: client.sentinel_get_master_addr_by_name(SENTINEL_MASTER))
        return int(address[1]) if address else None

    def sees_replica(self, replica: RedisServer) -> bool:
        replicas = self.ask(lambda client: client.sentinel_slaves(SENTINEL_MASTER)) or []
        return any(int(r["port"]) == replica.port and not r.get("is_sdown") and not r.get("is_odown")
                   and r.get("master-link-status") == "ok" for r in replicas)


class SentinelGroup:
    """A master, its replica and the Sentinels that watch them (tests/servers.private_sentinel)."""

    master_name = SENTINEL_MASTER

    def __init__(self, master: RedisServer, replica: RedisServer, sentinels: list[SentinelServer]) -> None:
        self.master = master
        self.replica = replica
        self.sentinels = sentinels

    def url(self, db: int = 0) -> str:
        """The broker URL: every Sentinel, the database number on the first (kombu reads it there)."""
        return ";".join(f"sentinel://{s.host}:{s.port}" + (f"/{db}" if i == 0 else "")
                        for i, s in enumerate(self.sentinels))

    def wait_for_failover(self, timeout: float = 30) -> float:
        """Until every Sentinel names the replica as the master and the replica says it is one;
        the seconds that took."""
        began = time.monotonic()

        def promoted() -> bool:
            if any(s.master_port() != self.replica.port for s in self.sentinels):
                return False
            client = self.replica.client()
            try:
                return client.info("replication")["role"] == "master"
            except (redis.ConnectionError, redis.TimeoutError):
                return False
            finally:
                client.close()

        try:
            wait_for(promoted, timeout=timeout, interval=0.1, what="the Sentinels to promote the replica")
        except AssertionError:
            raise ServerError("no failover:\n" + "\n".join(log_tail(s.log) for s in self.sentinels)) from None
        return time.monotonic() - began


@contextlib.contextmanager
def private_sentinel(*, sentinels: int = 1) -> Iterator[SentinelGroup]:
    """A private Redis master, one replica of it (--replicaof) and `sentinels` Sentinels
    monitoring it (quorum 1, down after SENTINEL_DOWN_AFTER_MS), on free ports; yields once
    every Sentinel sees the replica in sync, and stops them all and deletes their directories
    on leaving."""
    program = shutil.which("redis-server")
    if program is None:
        raise ServerError("redis-server was not found on PATH")
    directory = Path(tempfile.mkdtemp(prefix="cronfleet-sentinel-"))
    started: list[RedisServer] = []
    try:
        (directory / "master").mkdir()
        master = RedisServer(program, directory / "master", free_port())
        master.start()
        started.append(master)
        (directory / "replica").mkdir()
        replica = RedisServer(program, directory / "replica", free_port(), "--replicaof", master.host, str(master.port))
        replica.start()
        started.append(replica)
        watchers = []
        for i in range(sentinels):
            (directory / f"sentinel{i}").mkdir()
            watcher = SentinelServer(program, directory / f"sentinel{i}", free_port(), master)
            watcher.start()
            started.append(watcher)
            watchers.append(watcher)
        for watcher in watchers:
            try:
                wait_for(lambda w=watcher: w.sees_replica(replica), timeout=START_TIMEOUT, interval=0.1,
                         what="the Sentinel to see the replica")
            except AssertionError:
                raise ServerError(f"the Sentinel does not see the replica\n{log_tail(watcher.log)}\n"
                                  f"{log_tail(replica.log)}") from None
        yield SentinelGroup(master, replica, watchers)
    finally:
        for server in reversed(started):
            server.stop()
        shutil.rmtree(directory)


# --- RabbitMQ -----------------------------------------------------------------------------

# The Debian package's server script. /usr/sbin/rabbitmq-server wraps it to switch to the
# rabbitmq user, whose node is the machine's own; a node of the test's own runs as this process.
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQ_USER = "guest"  # RabbitMQ's default user: it may log in from the loopback only
RABBITMQ_STOP_TIMEOUT = 30  # seconds for a node to shut down on SIGTERM before it is killed


def rabbitmq_program() -> Path | None:
    """RabbitMQ's server script: CRONFLEET_TEST_RABBITMQ_SERVER, else RABBITMQ_SERVER; None
    when it is not installed."""
    program = Path(os.environ.get("CRONFLEET_TEST_RABBITMQ_SERVER") or RABBITMQ_SERVER)
    return program if program.is_file() else None


def descendants_of(pid: int) -> list[int]:
    """`pid`'s live children, theirs, and so on. A RabbitMQ node's helpers (erl_child_setup,
    inet_gethost) run in sessions of their own, so a signal to the node's process group
    misses them."""
    states = process_states()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, (state, ppid) in states.items() if ppid == parent and state != "Z"]
        found.extend(children)
        frontier.extend(children)
    return found


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
            self.proc = subprocess.Popen([str(self.program)], env=self.environment(), stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.directory, start_new_session=True)
        wait_for(lambda: self.proc.poll() is not None or self.answers(), timeout=START_TIMEOUT, interval=0.2,
                 what=f"RabbitMQ node {self.name} on port {self.port}")
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
        wait_for(lambda: not any(pid_alive(pid) for pid in victims), timeout=10,
                 what="the killed node's processes to be gone")

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
            wait_for(lambda: not any(pid_alive(pid) for pid in beam), timeout=RABBITMQ_STOP_TIMEOUT,
                     what="the node's processes to end")
        except (subprocess.TimeoutExpired, AssertionError):
            for victim in [self.proc.pid, *descendants_of(self.proc.pid), *beam]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def ctl(self, *args: str) -> str:
        """The output of `rabbitmqctl -n <node> <args>`, run with the node's cookie."""
        program = self.program.parent / "rabbitmqctl"
        env = {key: value for key, value in self.environment().items() if key != "RABBITMQ_DIST_PORT"}
        return run([str(program), "-n", self.name, *args], log=self.log, what="rabbitmqctl", timeout=60,
                   env=env, cwd=self.directory).stdout

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
        raise ServerError(f"RabbitMQ's server script was not found at {RABBITMQ_SERVER} "
                          "(set CRONFLEET_TEST_RABBITMQ_SERVER)")
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

    def ctl(self, *args: str) -> str:
        """rabbitmqctl on the first node still running (the cluster answers for all of them)."""
        return self.running()[0].ctl(*args)

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
        """The node that leads quorum queue `queue` ('' for a queue without one)."""
        listed = json.loads(self.ctl("list_queues", "--quiet", "--formatter", "json", "name", "leader"))
        return next((q.get("leader") or "" for q in listed if q["name"] == queue), "")


@contextlib.contextmanager
def private_rabbitmq_cluster(nodes: int = 3) -> Iterator[RabbitMQCluster]:
    """A started private RabbitMQ cluster of `nodes` nodes on free ports, every node stopped and
    its directory deleted on leaving (whether it runs then, or was killed)."""
    program = rabbitmq_program()
    if program is None:
        raise ServerError(f"RabbitMQ's server script was not found at {RABBITMQ_SERVER} "
                          "(set CRONFLEET_TEST_RABBITMQ_SERVER)")
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
        wait_for(lambda: sorted(cluster.members()) == sorted(node.name for node in members), timeout=START_TIMEOUT,
                 interval=0.5, what=f"{nodes} RabbitMQ nodes running in one cluster")
        yield cluster
    finally:
        for node in members:
            node.stop()
        for directory in directories:
            shutil.rmtree(directory)
