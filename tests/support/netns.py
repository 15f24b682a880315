"""A second machine on this one, as far as the network can tell: a Linux network namespace
joined to this host by a veth pair, with a /30 of its own. A server started inside it is
reached at `address`; `lose()` takes the namespace's end of the link down, so every packet
to it is dropped without an answer (no RST, no ICMP): what a client sees when the machine
holding its server loses power, unlike a killed process, whose kernel closes its sockets.

Needs `ip` (iproute2) and CAP_NET_ADMIN (root on the CI machine kind).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
from collections.abc import Iterator


class NetnsError(RuntimeError):
    pass


def ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Machine:
    def __init__(self, name: str, subnet: int) -> None:  # subnet: 0 to 16383
        self.name = name
        self.host_link, self.inner_link = f"{name}h", f"{name}i"
        offset = subnet * 4  # the /30 10.77.0.0 + offset: the host's end .1, the machine's .2
        self.host_address = f"10.77.{offset // 256}.{offset % 256 + 1}"
        self.address = f"10.77.{offset // 256}.{offset % 256 + 2}"

    @property
    def prefix(self) -> list[str]:
        """The argv prefix that runs a program inside the machine."""
        return ["ip", "netns", "exec", self.name]

    def create(self) -> None:
        ip("netns", "add", self.name)
        ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.inner_link)
        ip("link", "set", self.inner_link, "netns", self.name)
        ip("addr", "add", f"{self.host_address}/30", "dev", self.host_link)
        ip("link", "set", self.host_link, "up")
        ip("netns", "exec", self.name, "ip", "addr", "add", f"{self.address}/30", "dev", self.inner_link)
        ip("netns", "exec", self.name, "ip", "link", "set", self.inner_link, "up")
        ip("netns", "exec", self.name, "ip", "link", "set", "lo", "up")

    def lose(self) -> None:
        """The machine gone from the network: its end of the link down, its processes running on."""
        ip("netns", "exec", self.name, "ip", "link", "set", self.inner_link, "down")

    def destroy(self) -> None:
        with contextlib.suppress(NetnsError):
            ip("link", "del", self.host_link)
        with contextlib.suppress(NetnsError):
            ip("netns", "del", self.name)


def available() -> str | None:
    """Why no machine can be made here, or None when one can."""
    if shutil.which("ip") is None:
        return "needs ip (iproute2)"
    probe = Machine(f"cfp{random.randrange(10**6)}", random.randrange(16384))
    try:
        probe.create()
    except NetnsError as exc:
        return f"cannot make a network namespace: {exc}"
    finally:
        probe.destroy()
    return None


@contextlib.contextmanager
def machine() -> Iterator[Machine]:
    """A namespace with a link of its own, deleted (with its processes' sockets) on leaving."""
    found = Machine(f"cf{random.randrange(10**8)}", random.randrange(16384))
    found.create()
    try:
        yield found
    finally:
        found.destroy()
