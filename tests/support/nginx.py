"""nginx as Cronfleet's routing proxy in front of cells, run as shipped: a main configuration of
the caller's own around deploy/nginx/cronfleet-cells.conf and cronfleet-cells-proxy.conf, its
pid, logs and temporary files in one directory, the override maps in its cronfleet-cells/.
Used by tests/system/deploy/test_cell_routing.py and bench/scripts/bench_serving.py (--through-proxy)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "nginx"


def program() -> str | None:
    """Debian's nginx (in /usr/sbin, which a user's PATH may leave out), or None."""
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def argv(directory: Path) -> list[str]:
    """nginx in the foreground on `directory`'s nginx.conf (relative includes read from there)."""
    return [
        program() or "nginx",
        "-c",
        str(directory / "nginx.conf"),
        "-p",
        str(directory),
        "-e",
        str(directory / "error.log"),
    ]


def write_conf(directory: Path, port: int, upstreams: dict[str, int], *, includes: tuple[str, ...] = ()) -> Path:
    """nginx.conf in `directory`: the shipped maps, an upstream cronfleet_cell_<name> on each
    127.0.0.1 port given, `includes` (http context) and a server on `port` with the shipped
    location. Makes cronfleet-cells/ with an empty hosts.map unless it is there."""
    (directory / "cronfleet-cells").mkdir(exist_ok=True)
    hosts = directory / "cronfleet-cells" / "hosts.map"
    if not hosts.exists():
        hosts.write_text("")
    blocks = "".join(
        f"    upstream cronfleet_cell_{name} {{ server 127.0.0.1:{web}; }}\n" for name, web in upstreams.items()
    )
    user = "user root;\n" if os.geteuid() == 0 else ""  # the workers read the caller's files
    temporary = "".join(
        f"    {kind}_temp_path {directory}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    extra = "".join(f"    include {path};\n" for path in includes)
    conf = directory / "nginx.conf"
    conf.write_text(
        f"{user}daemon off;\npid {directory}/nginx.pid;\nerror_log {directory}/error.log;\n"
        f"events {{}}\nhttp {{\n    access_log off;\n{temporary}"
        f"    include {SHIPPED}/cronfleet-cells.conf;\n{extra}{blocks}"
        f"    server {{\n        listen 127.0.0.1:{port};\n"
        f"        include {SHIPPED}/cronfleet-cells-proxy.conf;\n    }}\n}}\n"
    )
    return conf


def workers(master: int) -> set[int]:
    """The pids of nginx master `master`'s worker processes (its children, read from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == master:  # the field after the state: the parent
                found.add(int(entry))
    return found


def reload(master: int, timeout: float = 30) -> None:
    """`nginx -s reload`, waited for: SIGHUP to `master`, then until every worker of the old
    configuration has exited (till then one may still answer with the old maps) and a new one runs."""
    old = workers(master)
    os.kill(master, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while (now := workers(master)) & old or not now:
        if time.monotonic() > deadline:
            raise AssertionError(f"nginx's old workers {sorted(now & old)} still run {timeout:g} s after the reload")
        time.sleep(0.05)
