"""What the benchmarks share: reading a process's CPU and memory from /proc, child
processes with their output in files, seeding jobs with COPY, and the tables they print.

Nothing here knows a scenario; each scenario is a module of its own beside this one.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, models

from scheduler_app.models import Job, JobRun, Tenant, db_now

PREFIX = "bench-"  # every bench tenant's slug starts with it (bench.py deletes them)
TICK = os.sysconf("SC_CLK_TCK")

# --- /proc ---------------------------------------------------------------------------------


def status_kb(pid: int, field: str) -> int | None:
    """A memory field (VmRSS, VmHWM) of /proc/PID/status in kB; None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, ValueError, IndexError):
        return None


def _all_stats() -> dict[int, tuple[str, int, float]]:
    """(command name, parent pid, CPU seconds) of every process of this machine, by pid."""
    found: dict[int, tuple[str, int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        found[int(entry)] = (
            text[text.find("(") + 1 : text.rfind(")")],
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / TICK,
        )
    return found


def cpu_by_command(name: str) -> dict[int, float]:
    """CPU seconds of every process of this machine whose command name is `name`, by pid."""
    return {pid: cpu for pid, (command, _, cpu) in _all_stats().items() if command == name}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two samples by pid (processes that exited in between are missed)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and its descendants (a prefork worker's pool processes)."""
    stats = _all_stats()
    return sum(stats[p][2] for p in tree_pids(pid, stats) if p in stats)


def tree_pids(pid: int, stats: dict | None = None) -> set[int]:
    """`pid` and its descendants, from /proc (or `stats`, _all_stats() read already)."""
    stats = _all_stats() if stats is None else stats
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, (_, ppid, _) in stats.items() if ppid == parent and child not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def machine_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot (/proc/stat)."""
    try:
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def database_backends() -> dict[int, float]:
    """CPU seconds of the PostgreSQL backends connected to this database now, by pid.

    The server is shared (other databases, other users): only this database's backends are
    counted, not the server's background writers. A backend that connects later counts
    from zero (cpu_delta); CpuMeter.tick() keeps those that disconnect.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        pids = [row[0] for row in cursor.fetchall()]
    return {pid: cpu for pid in pids if (cpu := cpu_seconds(pid)) is not None}


class CpuMeter:
    """CPU seconds used between start() and stop() by: this machine (busy ticks), this
    database's PostgreSQL backends, the Redis server (whole server: shared), this command,
    and any named groups of pids (their process trees).

    A beat or worker reconnects every DB_CONN_MAX_AGE (60 s), and a backend that exited is
    gone from /proc: call tick() every second or so, and each backend counts up to its last
    sighting (without it a 6-minute run counted a sixth of the beats' backends)."""

    def __init__(self, groups: dict[str, Callable[[], Iterable[int]]]) -> None:
        self.groups = groups
        self.used: dict[str, float] = {}
        self.machine_busy: float | None = None  # share of all cores busy
        self.seen: dict[int, float] = {}  # backend pid -> its CPU seconds when last seen
        self.last_tick = 0.0

    def tick(self, every: float = 1.0) -> None:
        """Note the CPU of this database's backends now (at most once per `every` seconds)."""
        if time.monotonic() - self.last_tick >= every:
            self.last_tick = time.monotonic()
            self.seen.update(database_backends())

    def _sample(self) -> dict:
        return {
            "groups": {name: sum(tree_cpu(pid) for pid in pids()) for name, pids in self.groups.items()},
            "postgres": database_backends(),
            "redis": cpu_by_command("redis-server"),
            "self": sum(os.times()[:2]),
            "ticks": machine_ticks(),
        }

    def start(self) -> None:
        self.before = self._sample()
        self.seen = dict(self.before["postgres"])
        self.last_tick = time.monotonic()

    def stop(self) -> None:
        after = self._sample()
        before = self.before
        self.used = {name: after["groups"][name] - before["groups"][name] for name in self.groups}
        # Backends that connected during the window (a reconnect) count from 0; those that
        # exited count to their last tick().
        self.seen.update(after["postgres"])
        self.used["postgres"] = cpu_delta(before["postgres"], self.seen)
        self.used["redis"] = cpu_delta(before["redis"], after["redis"])
        self.used["bench command"] = after["self"] - before["self"]
        self.machine_busy = None
        if before["ticks"] and after["ticks"] and after["ticks"][1] > before["ticks"][1]:
            busy = after["ticks"][0] - before["ticks"][0]
            self.machine_busy = busy / (after["ticks"][1] - before["ticks"][1])
            self.used["other processes"] = busy / TICK - sum(self.used.values())


# --- child processes -------------------------------------------------------------------------


class Children:
    """Child processes with their output in files; all stopped at the end."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="cronfleet-bench-"))
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.spawned: dict[str, float] = {}  # name -> time.monotonic() at spawn

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = (self.folder / f"{name}.log").open("wb")
        self.spawned[name] = time.monotonic()
        # In the checkout, wherever the bench was started from: `celery -A project` (or
        # bench.floor, bench.peer_app) imports its app from the working directory.
        proc = subprocess.Popen(
            argv,
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((name, proc))
        return proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def pids(self, part: str = "") -> list[int]:
        """The pids of the running children whose name contains `part`."""
        return [proc.pid for name, proc in self.procs if part in name and proc.poll() is None]

    def cpu(self) -> float:
        return sum(tree_cpu(proc.pid) for _, proc in self.procs if proc.poll() is None)

    def dead(self) -> list[tuple[str, int]]:
        """(name, exit code) of the children that have exited."""
        return [(name, proc.returncode) for name, proc in self.procs if proc.poll() is not None]

    def send_signal(self, name: str, signum: int = signal.SIGTERM) -> None:
        """Send `signum` to one child's process group and go on (stop_all waits for it)."""
        proc = dict(self.procs)[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signum)

    def stop(self, name: str, timeout: float = 30) -> int:
        """SIGTERM one child's process group, wait (SIGKILL after `timeout`); its exit code."""
        proc = dict(self.procs)[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def stop_all(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()


# --- seeding with COPY -------------------------------------------------------------------------


def _copy_text(value) -> str:
    """One value in PostgreSQL's COPY text format."""
    if value is None:
        return r"\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, dict)):
        value = json.dumps(value)
    text = str(value)
    if any(c in text for c in "\\\t\n\r"):
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def copy_rows(
    model: type[models.Model], count: int, fixed: dict, varying: dict[str, Callable[[int], object]], chunk: int = 20000
) -> None:
    """Insert `count` rows of `model` with one COPY: every column from `fixed`, the field's
    default ("" for text), or (auto_now fields) the database's now; the columns in `varying` from their
    function of the row number 0..count-1. ~15x faster than bulk_create."""
    now = db_now()
    columns, parts, functions = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(field.column)
        if field.attname in varying or field.name in varying:
            parts.append(None)
            functions.append(varying.get(field.attname) or varying[field.name])
            continue
        if field.attname in fixed or field.name in fixed:
            value = fixed.get(field.attname, fixed.get(field.name))
        elif getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            value = now
        else:
            value = field.get_default()  # "" for a blank text field without a default
        parts.append(_copy_text(value))
    # One format string a row: the fixed columns' text in place, {} where a value varies.
    template = "\t".join("{}" if part is None else part.replace("{", "{{").replace("}", "}}") for part in parts) + "\n"
    statement = f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        for start in range(0, count, chunk):
            copy.write(
                "".join(
                    template.format(*(_copy_text(f(i)) for f in functions))
                    for i in range(start, min(start + chunk, count))
                )
            )


def make_tenants(count: int, label: str) -> list[int]:
    """`count` bench tenants (slugs bench-<label>-<i>); their ids."""
    tenants = Tenant.objects.bulk_create(
        Tenant(slug=f"{PREFIX}{label}-{i}", name=f"Bench tenant {label} {i}", timezone="UTC") for i in range(count)
    )
    return [tenant.id for tenant in tenants]


def vacuum() -> None:
    """VACUUM ANALYZE the job and run tables: after a clean-up that deleted a million rows
    this takes many seconds, so scenarios do it before they choose their fire instants."""
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
        cursor.execute(f"VACUUM ANALYZE {JobRun._meta.db_table}")


def checkpoint() -> bool:
    """CHECKPOINT: write every dirty buffer now, so that a phase measured next starts with no
    checkpoint due. PostgreSQL begins one each max_wal_size/2 or so of WAL; without this, the
    WAL of seeding or of the phase before brings one on in the middle of some phases and not
    of others. False (nothing done) where the role may not: a superuser or pg_checkpoint may."""
    if connection.vendor != "postgresql":
        return False
    try:
        with connection.cursor() as cursor:
            cursor.execute("CHECKPOINT")
    except DatabaseError:  # insufficient privilege: the phases are measured as they come
        return False
    return True


def wal_position() -> int | None:
    """PostgreSQL's current WAL position in bytes (pg_current_wal_lsn): the difference of two
    is the WAL written between them. None on other databases."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
        return cursor.fetchone()[0]


def wal_since(position: int | None) -> int | None:
    """Bytes of WAL written since wal_position() returned `position` (None: not known)."""
    now = wal_position()
    return None if now is None or position is None else now - position


def seed_jobs(tenant_ids: Sequence[int], count: int, *, varying: dict | None = None, **fixed) -> float:
    """COPY `count` jobs spread over `tenant_ids` (named job-<i>), then VACUUM ANALYZE the
    job table (the planner sees a steady-state table, not an empty one); returns the seconds
    the COPY took (the VACUUM not counted). Call vacuum() first."""
    ids = list(tenant_ids)
    started = time.monotonic()
    copy_rows(
        Job, count, fixed, {"tenant_id": lambda i: ids[i % len(ids)], "name": lambda i: f"job-{i}", **(varying or {})}
    )
    seconds = time.monotonic() - started
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
    return seconds


def next_whole_second(at: datetime, lead: float) -> datetime:
    """The first whole second at least `lead` seconds after `at`."""
    later = at + timedelta(seconds=lead)
    return (later + timedelta(seconds=1)).replace(microsecond=0) if later.microsecond else later


def sleep_until(at: datetime) -> float:
    """Sleep until the database's clock reads `at`; return time.monotonic() at that instant
    (computed from one reading of the database's clock, not from the wake-up)."""
    left = (at - db_now()).total_seconds()
    mark = time.monotonic() + left
    if left > 0:
        time.sleep(left)
    return mark


def epoch(at: datetime) -> float:
    return at.astimezone(UTC).timestamp()


# --- printing --------------------------------------------------------------------------------


def num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def mib(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def table(out: Callable[[str], None], header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> None:
    """A plain text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [str(row[0]).ljust(widths[0]), *(str(cell).rjust(width) for cell, width in zip(row[1:], widths[1:]))]
        out(indent + "  ".join(cells).rstrip())


def print_checks(out: Callable[[str], None], checks: Sequence[tuple[str, str, bool]]) -> bool:
    """Print (label, shown value, passed) checks; True when all passed."""
    out("  checks")
    width = max((len(label) for label, _, _ in checks), default=0)
    for label, shown, passed in checks:
        out(f"    {label:<{width}}  {shown:>24}  {'ok' if passed else 'FAIL'}")
    return all(passed for _, _, passed in checks)


def machine_line() -> str:
    db = settings.DATABASES["default"]
    return f"PostgreSQL {db['NAME']!r} at {db.get('HOST') or 'local'}; {os.cpu_count()} CPUs; load average " + " ".join(
        f"{x:.2f}" for x in os.getloadavg()
    )
