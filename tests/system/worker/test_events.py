"""A worker sends its task events in batches (worker/events.py): every event still arrives,
in order, in far fewer broker messages than events, and none is lost when the worker stops
with events still buffered. A real worker, and Celery's own event receiver on the broker."""

from __future__ import annotations

import math
import threading

import pytest
from celery.events.receiver import EventReceiver

from project.celery import app
from scheduler_app import services
from scheduler_app.models import JobRun, RunState, celery_task_id
from tests.conftest import wait_for
from tests.support.observing import start_worker

TASK_EVENTS = ("task-received", "task-started", "task-succeeded")


class Listener:
    """Celery's EventReceiver in a thread, keeping every event on the broker and the size of
    each broker message that carried them (a batch is a list of events)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.messages: list[int] = []  # task events per message that carried any
        self.ready = threading.Event()
        self.connection = app.connection_for_read()
        listener = self

        class Receiver(EventReceiver):
            def _receive(self, body, message, list=list, isinstance=isinstance):
                events = body if isinstance(body, list) else [body]
                tasks = sum(1 for event in events if str(event.get("type", "")).startswith("task-"))
                if tasks:  # not the worker's own events (worker-online, heartbeats)
                    listener.messages.append(tasks)
                super()._receive(body, message)

            def on_consume_ready(self, *args, **kwargs):
                super().on_consume_ready(*args, **kwargs)
                listener.ready.set()

        self.receiver = Receiver(self.connection, handlers={"*": self.events.append}, app=app)
        self.thread = threading.Thread(target=self._capture, daemon=True)

    def _capture(self) -> None:
        self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def __enter__(self) -> Listener:
        self.thread.start()
        assert self.ready.wait(timeout=10), "the event receiver did not start consuming"
        return self

    def __exit__(self, *exc) -> None:
        self.receiver.should_stop = True
        self.thread.join(timeout=10)
        self.connection.release()

    def of(self, task_ids: set[str]) -> list[tuple[str, str]]:
        return [
            (event["type"], event["uuid"])
            for event in self.events
            if event["type"].startswith("task-") and event.get("uuid") in task_ids
        ]


def _runs(tenant, queue_name: str, count: int) -> list[JobRun]:
    job = services.job_create(
        tenant, services.JobSpec(name="events", task_name="scheduler_app.echo", every=3600, queue=queue_name)
    )
    return [services.job_trigger(job, actor="test") for _ in range(count)]


def _finished(runs: list[JobRun]) -> bool:
    return JobRun.objects.filter(id__in=[run.id for run in runs], state=RunState.SUCCEEDED).count() == len(runs)


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["prefork", "threads"])  # threads: events come from the pool's threads
@pytest.mark.django_db(transaction=True)
def test_the_workers_task_events_arrive_in_order_in_few_messages(tenant, processes, queue_name, pool):
    with Listener() as listener:
        start_worker(processes, queue_name, "worker", "-P", pool, CRONFLEET_EVENT_FLUSH_SECONDS="1.0")
        runs = _runs(tenant, queue_name, 10)
        ids = {celery_task_id(run.id, 1) for run in runs}
        wait_for(lambda: len(listener.of(ids)) == 3 * len(runs), timeout=60, what="three task events of each run")
        seen = listener.of(ids)
        for task_id in ids:
            assert [kind for kind, uuid in seen if uuid == task_id] == list(TASK_EVENTS)
        # Thirty events, sent at most once a second (and whenever Celery's buffer holds 24):
        # a message per second they spread over, and a few more, where Celery sent each
        # event on its own or two together (25 messages for 30 events here).
        stamps = [event["timestamp"] for event in listener.events if event.get("uuid") in ids]
        bound = math.ceil(max(stamps) - min(stamps)) + 1 + 30 // 24
        assert len(listener.messages) <= bound, (listener.messages, bound)
        assert max(listener.messages) >= 5, listener.messages


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_stops_sends_the_events_it_still_holds(tenant, processes, queue_name):
    with Listener() as listener:
        worker = start_worker(processes, queue_name, "worker", CRONFLEET_EVENT_FLUSH_SECONDS="600")
        runs = _runs(tenant, queue_name, 2)
        ids = {celery_task_id(run.id, 1) for run in runs}
        wait_for(lambda: _finished(runs), timeout=60, what="the runs to succeed")
        # Buffered for ten minutes (or until Celery's limit of 24 events): none sent yet.
        assert listener.of(ids) == []
        assert processes.stop(worker) == 0  # a warm shutdown
        wait_for(lambda: len(listener.of(ids)) == 3 * len(runs), timeout=30, what="the stopped worker's task events")
