"""Private PostgreSQL clusters: one server, a primary with its streaming standby, a database on
either for this process's Django connection.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

from tests.conftest import wait_for
from tests.support.servers.common import HOST, START_TIMEOUT, ServerError, children_of, free_port, pid_alive, run

POSTGRES_PROGRAMS = ("initdb", "pg_ctl", "postgres", "pg_basebackup")
POSTGRES_OS_USER = "postgres"  # initdb and postgres refuse to run as root: as root, run them as this user


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
        run(
            [*self.prefix, str(self.bindir / name), *args], log=self.log, what=what, timeout=timeout, cwd=self.directory
        )  # the postgres user may not be able to enter this process's directory

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
        self.program(
            "initdb",
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            self.user,
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
            what="initdb",
        )
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
        self.program(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(START_TIMEOUT),
            "start",
            what="starting PostgreSQL",
        )

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
        self.program(
            "pg_basebackup",
            "-h",
            primary.host,
            "-p",
            str(primary.port),
            "-U",
            primary.user,
            "-D",
            str(self.data),
            "-R",
            "-X",
            "stream",
            "--no-sync",
            what="pg_basebackup",
        )
        with (self.data / "postgresql.conf").open("a") as conf:  # later lines win over the primary's
            conf.write(f"port = {self.port}\nunix_socket_directories = '{self.directory}'\n")

    def promote(self) -> None:
        """End recovery: the standby becomes a primary that takes writes (pg_ctl -w waits)."""
        self.program(
            "pg_ctl", "-D", str(self.data), "-w", "-t", str(START_TIMEOUT), "promote", what="promoting the standby"
        )

    def restart_immediately(self) -> None:
        """The crash the scenario is about: every backend killed without a checkpoint, then
        crash recovery on start. pg_ctl -w returns once the server accepts connections."""
        self.program(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-m",
            "immediate",
            "-w",
            "-t",
            str(START_TIMEOUT),
            "restart",
            what="restarting PostgreSQL (immediate)",
        )

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
        raise ServerError(
            f"PostgreSQL's {', '.join(POSTGRES_PROGRAMS)} were not found "
            "(set CRONFLEET_TEST_PG_BINDIR, or put pg_config on PATH)"
        )
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
                wait_for(
                    lambda: (
                        primary.fetch_one("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'")
                        == wanted
                    ),
                    timeout=START_TIMEOUT,
                    what=f"the standby streaming ({wanted})",
                )
                yield primary, standby
            finally:
                standby.stop()
        finally:
            shutil.rmtree(directory)


@contextlib.contextmanager
def database_on(
    host: str, port: int | str, name: str, *, migrate: bool = True, options: dict[str, str] | None = None
) -> Iterator[None]:
    """Point this process's default Django connection (and so the beats and workers the
    `processes` fixture starts, which read it) at database `name` on host:port, migrated
    first; restore the previous settings on leaving. The connection is closed at each switch,
    so the next query connects to the database now configured."""
    from django.contrib.contenttypes.models import ContentType
    from django.core.management import call_command
    from django.db import connection

    saved = {key: connection.settings_dict[key] for key in ("HOST", "PORT", "NAME", "OPTIONS")}
    connection.close()
    connection.settings_dict.update(
        HOST=host, PORT=str(port), NAME=name, OPTIONS={**saved["OPTIONS"], **(options or {})}
    )
    ContentType.objects.clear_cache()  # ids cached from the other database
    try:
        if migrate:
            call_command("migrate", verbosity=0, interactive=False)
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)
        ContentType.objects.clear_cache()
