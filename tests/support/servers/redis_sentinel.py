"""Private Redis servers, and Sentinel groups watching a master and its replica."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from tests.conftest import wait_for
from tests.support.servers.common import HOST, START_TIMEOUT, ServerError, free_port, log_tail


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
        server.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=server.directory, start_new_session=True
        )
    client = server.client()
    try:
        wait_for(
            lambda: server.proc.poll() is not None or redis_answers(client, server.proc.pid),
            timeout=START_TIMEOUT,
            interval=0.05,
            what=f"{what} on port {server.port}",
        )
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
        argv = [
            self.program,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.directory),
            *self.args,
        ]
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
        self.conf.write_text(
            "\n".join(
                [
                    f"port {port}",
                    f"bind {self.host}",
                    f"dir {directory}",
                    "protected-mode no",
                    f"sentinel monitor {SENTINEL_MASTER} {master.host} {master.port} 1",
                    f"sentinel down-after-milliseconds {SENTINEL_MASTER} {SENTINEL_DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {SENTINEL_MASTER} {SENTINEL_FAILOVER_TIMEOUT_MS}",
                    "",
                ]
            )
        )

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
        return any(
            int(r["port"]) == replica.port
            and not r.get("is_sdown")
            and not r.get("is_odown")
            and r.get("master-link-status") == "ok"
            for r in replicas
        )


class SentinelGroup:
    """A master, its replica and the Sentinels that watch them (tests/servers.private_sentinel)."""

    master_name = SENTINEL_MASTER

    def __init__(self, master: RedisServer, replica: RedisServer, sentinels: list[SentinelServer]) -> None:
        self.master = master
        self.replica = replica
        self.sentinels = sentinels

    def url(self, db: int = 0) -> str:
        """The broker URL: every Sentinel, the database number on the first (kombu reads it there)."""
        return ";".join(
            f"sentinel://{s.host}:{s.port}" + (f"/{db}" if i == 0 else "") for i, s in enumerate(self.sentinels)
        )

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
                wait_for(
                    lambda w=watcher: w.sees_replica(replica),
                    timeout=START_TIMEOUT,
                    interval=0.1,
                    what="the Sentinel to see the replica",
                )
            except AssertionError:
                raise ServerError(
                    f"the Sentinel does not see the replica\n{log_tail(watcher.log)}\n{log_tail(replica.log)}"
                ) from None
        yield SentinelGroup(master, replica, watchers)
    finally:
        for server in reversed(started):
            server.stop()
        shutil.rmtree(directory)
