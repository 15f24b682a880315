"""Slots for HTTP attempts in flight: a cap per worker process and a fair share per host.

One slow or hanging receiver must cost only its own host's share of a worker. A slot is
taken at once while slots are free and no other host is waiting; otherwise the attempt
waits, and each freed slot goes to the waiting host with the fewest attempts in flight
(a host already holding many gets the next slot only when every other waiting host holds
as many). A host also never holds more than `per_host` slots. So a receiver that hangs
until the deadline ends up holding about its fair share of the slots, not all of them,
while the others' attempts keep turning over.

Pure asyncio and single-threaded: every call is made on the worker's event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable


class FairSlots:
    def __init__(self, total: int, per_host: int, on_change: Callable[[], None] = lambda: None) -> None:
        self.total = total
        self.per_host = min(per_host, total)
        self.busy = 0
        self.in_flight: dict[Hashable, int] = {}
        self._waiting: dict[Hashable, deque[asyncio.Future]] = {}
        self._on_change = on_change  # called when a host starts or stops waiting (saturated_hosts())

    def waiting(self) -> int:
        """Attempts waiting for a slot."""
        return sum(len(queue) for queue in self._waiting.values())

    def saturated_hosts(self) -> int:
        """Hosts with attempts waiting (their share, or the process's slots, taken)."""
        return len(self._waiting)  # a host's queue is dropped when it empties

    def try_take(self, host: Hashable) -> bool:
        """Take a slot for `host` now if one is free to it and no other host waits for one."""
        if self._may_take(host) and not self._others_could_take():
            self._take(host)
            return True
        return False

    async def acquire(self, host: Hashable) -> None:
        if self.try_take(host):
            return
        future = asyncio.get_running_loop().create_future()
        if host not in self._waiting:
            self._waiting[host] = deque()
            self._on_change()
        self._waiting[host].append(future)
        self._grant()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(host)  # granted as it was cancelled: hand the slot on
            else:
                self._forget(host, future)
            raise

    def release(self, host: Hashable) -> None:
        self.busy -= 1
        left = self.in_flight[host] - 1
        if left:
            self.in_flight[host] = left
        else:
            del self.in_flight[host]
        self._grant()

    def _may_take(self, host: Hashable) -> bool:
        return self.busy < self.total and self.in_flight.get(host, 0) < self.per_host

    def _others_could_take(self) -> bool:
        return any(queue and self.in_flight.get(host, 0) < self.per_host for host, queue in self._waiting.items())

    def _take(self, host: Hashable) -> None:
        self.busy += 1
        self.in_flight[host] = self.in_flight.get(host, 0) + 1

    def _grant(self) -> None:
        while self.busy < self.total:
            candidates = [
                host for host, queue in self._waiting.items() if queue and self.in_flight.get(host, 0) < self.per_host
            ]
            if not candidates:
                return
            host = min(candidates, key=lambda h: self.in_flight.get(h, 0))
            queue = self._waiting[host]
            future = queue.popleft()
            if not queue:
                del self._waiting[host]
                self._on_change()
            if future.done():  # cancelled while waiting
                continue
            self._take(host)
            future.set_result(None)

    def _forget(self, host: Hashable, future: asyncio.Future) -> None:
        queue = self._waiting.get(host)
        if queue is None:
            return
        try:
            queue.remove(future)
        except ValueError:
            pass
        if not queue:
            del self._waiting[host]
            self._on_change()
