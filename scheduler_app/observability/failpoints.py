"""Named failpoints: places in the beat and the worker where a fault test makes the process
kill or stop itself, so a fault lands at an exact spot instead of by timing luck.

Inert unless the environment names them, e.g.

    CRONFLEET_FAILPOINTS="beat.after_commit=kill,worker.before_target=stop"

Actions: `kill` (SIGKILL itself), `stop` (SIGSTOP itself; continue it with SIGCONT),
`sleep:SECONDS`, `raise` (raise FailpointError). Add `@N` to fire only on the N-th hit
(`beat.after_claim=kill@3`). Production never sets the variable: a hit is then one dict
lookup.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from django.core.exceptions import ImproperlyConfigured

ENV = "CRONFLEET_FAILPOINTS"
NAMES = frozenset(
    {
        "beat.after_claim",  # jobs locked and planned, runs not yet inserted (inside the transaction)
        "beat.after_commit",  # runs committed, not yet published
        "beat.after_publish",  # runs published
        "worker.before_target",  # run started (CAS won), target not yet called
        "worker.after_target",  # target returned, outcome not yet recorded
    }
)


class FailpointError(RuntimeError):
    pass


def _parse(raw: str) -> dict[str, tuple[str, int]]:
    points: dict[str, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, _, action = item.partition("=")
        if name not in NAMES:
            raise ImproperlyConfigured(f"{ENV}: unknown failpoint {name!r} (known: {', '.join(sorted(NAMES))})")
        action, _, nth = action.partition("@")
        if not (action in {"kill", "stop", "raise"} or action.startswith("sleep:")):
            raise ImproperlyConfigured(f"{ENV}: unknown action {action!r} for {name}")
        points[name] = (action, int(nth or 1))
    return points


_points = _parse(os.environ.get(ENV, ""))
_hits: dict[str, int] = {}
_lock = threading.Lock()


def failpoint(name: str) -> None:
    if not _points:
        return
    point = _points.get(name)
    if point is None:
        return
    action, nth = point
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] != nth:
            return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "raise":
        raise FailpointError(name)
    else:
        time.sleep(float(action.split(":", 1)[1]))
