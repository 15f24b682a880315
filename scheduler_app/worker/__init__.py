"""The worker: what a Celery worker does with a run's message.

- execution.py: start a run by compare-and-set, run its target (targets/), classify the
  outcome and write it; retries decided here;
- transitions.py: the start and end statements, for one run or a batch;
- leases.py: a running run's lease, renewed from a thread while its target runs;
- reconnect.py: the connection a worker keeps, checked before each start;
- delivery.py: how a delivery is reported to Celery, Flower and the metrics;
- step.py: the worker's bootstep (its node row, heartbeat and metrics exporter);
- events.py: the consumer that sends Celery's task events in batches.

This face imports nothing: project/celery.py imports step.py when the Celery app is made,
before Django is set up. tasks.py calls execution and delivery; the Celery app installs
step and events.
"""

__all__ = ["delivery", "events", "execution", "step"]
