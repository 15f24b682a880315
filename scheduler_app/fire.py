"""What a target task can learn about the fire it is running for.

    from scheduler_app.fire import current_fire

    @shared_task(name="billing.close_day")
    def close_day():
        fire = current_fire()  # fire.fire_key, fire.attempt, fire.scheduled_at

A run of a chained job (Job.after_job, docs/chains.md) also learns the run whose end
started it: fire.parent_fire_key and fire.parent_run_id (None for other runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class FireContext:
    fire_key: str  # the same on every attempt: use it as an idempotency key
    attempt: int
    scheduled_at: datetime  # UTC
    run_id: int
    job_id: int
    job_name: str
    tenant: str
    parent_fire_key: str | None = None  # a chained run's parent's fire key (None: not chained, or pruned)
    parent_run_id: int | None = None  # the run whose end started this chained run


_current: ContextVar[FireContext | None] = ContextVar("cronfleet_fire", default=None)


def current_fire() -> FireContext | None:
    """The fire being executed, or None outside a Cronfleet run."""
    return _current.get()


@contextlib.contextmanager
def firing(context: FireContext) -> Iterator[FireContext]:
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
