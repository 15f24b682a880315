"""The worker's consumer, sending its task events (what Flower shows) a few times a second
in batches instead of once per event.

Celery buffers a worker's task events (task-received, task-started, task-succeeded...) and
flushes the buffer on the event loop's next turn: with one short run per message that is
a publish per event, three a run, each a serialisation and a broker round trip in the
worker's main process, which also receives, hands out and acknowledges every message.
A py-spy profile of a worker running about 500 runs a second put 39% of that process's samples
in those flushes. This consumer flushes at most every CRONFLEET_EVENT_FLUSH_SECONDS
(settings), or sooner when the buffer holds Celery's limit (24 events): each flush is one
message (routing key `task.multi`) carrying the events in order, which Celery's event
receiver (and so Flower) takes apart as if they had come one by one. An event reaches
Flower up to that long after it happened; 0 restores Celery's own behaviour.

Events still buffered when the consumer stops or shuts down are flushed first.

The consumer also sets up Celery's native delayed delivery through the node it is connected
to only (worker/delayed.py), so a RabbitMQ node that is down no longer holds up its start.

This module imports nothing of Django at import time (the worker names its consumer class
before Django is set up); settings are read when the first event is buffered.
"""

from __future__ import annotations

import threading
import time

from celery.worker.consumer import Consumer as CeleryConsumer

# A flush that was planned but has not happened this long after its time (the event loop
# was replaced after a lost connection, say) is planned again.
OVERDUE_SECONDS = 5.0

CELERY_DELAYED_DELIVERY = "celery.worker.consumer.delayed_delivery:DelayedDelivery"


class Consumer(CeleryConsumer):
    class Blueprint(CeleryConsumer.Blueprint):
        default_steps = [
            "scheduler_app.worker.delayed:DelayedDelivery" if step == CELERY_DELAYED_DELIVERY else step
            for step in CeleryConsumer.Blueprint.default_steps
        ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._flush_lock = threading.Lock()  # a threads pool sends events from its threads too
        self._flush_due: float | None = None  # when the planned flush is to happen (monotonic); None: none planned
        self._flush_seconds: float | None = None

    def on_send_event_buffered(self) -> None:
        if not self.hub:
            return
        if self._flush_seconds is None:
            from scheduler_app.conf import app_settings  # read late: the consumer class is made before Django is set up

            self._flush_seconds = app_settings.EVENT_FLUSH_SECONDS
        if not self._flush_seconds:
            super().on_send_event_buffered()
            return
        with self._flush_lock:
            now = time.monotonic()
            if self._flush_due is not None and now < self._flush_due + OVERDUE_SECONDS:
                return  # a flush is planned: this event goes with it
            self._flush_due = now + self._flush_seconds
        # call_soon may be called from any thread; the timer belongs to the event loop's.
        self.hub.call_soon(self._plan_flush, self._flush_seconds)

    def _plan_flush(self, seconds: float) -> None:
        self.hub.call_later(seconds, self._planned_flush)

    def _planned_flush(self) -> None:
        with self._flush_lock:
            self._flush_due = None
        self._flush_events()

    def stop(self) -> None:
        self._flush_events()
        super().stop()

    def shutdown(self) -> None:
        self._flush_events()
        super().shutdown()
