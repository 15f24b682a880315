"""The floor for `bench e2e`: a plain Celery app (no Django, no database) whose task does
nothing at all, with the worker settings Cronfleet's workers use; the bench times the
drain of its queue (messages waiting and unacknowledged, read from the broker).

    celery -A bench.floor worker -Q bench-floor ...

What Cronfleet's worker costs above this is the price of recording each run.
"""

import os
import time

import redis
from celery import Celery

QUEUE = "bench-floor"
UNACKED = ("unacked", "unacked_index")  # the Redis transport's messages delivered and not acknowledged yet
LAGS = "bench-floor:lags"  # bench steady: seconds each timed task started after its due instant

# Not the current app: importing the bench must not make this the app the product reads its
# broker settings from (scheduler_app/conf.py reads celery.current_app).
app = Celery("cronfleet-floor", set_as_current=False)
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    # As project/settings.py sets them for Cronfleet's workers.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    accept_content=["json"],
    task_serializer="json",
    task_ignore_result=True,
    worker_send_task_events=os.environ.get("CELERY_WORKER_SEND_TASK_EVENTS", "true").lower() in {"1", "true", "yes"},
    broker_transport_options={"priority_steps": list(range(10))},
    broker_connection_retry_on_startup=True,
)
_counter = None


@app.task(name="bench.floor.noop")
def noop(*args) -> None:
    """Nothing: the bench knows all are done when the queue has drained (acks_late: a
    message is acknowledged once its task has returned)."""


@app.task(name="bench.floor.timed")
def timed(due: float) -> None:
    """Nothing, then one RPUSH of how late it started: now - `due` (epoch seconds)."""
    _client().rpush(LAGS, time.time() - due)


def _client() -> redis.Redis:
    global _counter
    if _counter is None:
        _counter = redis.Redis.from_url(app.conf.broker_url)
    return _counter
