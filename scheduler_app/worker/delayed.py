"""Celery's native delayed delivery set up through the node the worker's consumer holds.

With quorum queues on RabbitMQ, Celery's consumer declares the `celery_delayed_*` exchanges
and queues of native delayed delivery (its DelayedDelivery step) on every start and restart,
once for each URL in CELERY_BROKER_URL, before it takes any message. Given a cluster as
kombu's failover list (`amqp://a//;amqp://b//;amqp://c//`), that step tries each node in
turn, and a node that is down costs three refused connections and the growing sleeps between
them, during which the worker takes no message: after a node of three died, that was most of
the outage (docs/operating.md, A cluster of three), and it comes back at every start while
the node stays down.

A cluster declares an exchange or a queue for all its nodes at once, so once is enough: this
step declares them through the node the consumer is connected to (the one that answered),
and a node that is down is never asked. A worker that fails over to another broker declares
them there as it connects. Cronfleet itself sends no delayed message (a retry waits in the
ledger); the step stays for the host's tasks with a countdown or an ETA.
"""

from __future__ import annotations

from celery.worker.consumer.delayed_delivery import DelayedDelivery as CeleryDelayedDelivery


class DelayedDelivery(CeleryDelayedDelivery):
    """Celery's step, given the connected node's URL in place of every node's."""

    def start(self, c) -> None:
        self._connected = c.connection.as_uri(include_password=True)
        super().start(c)

    def _validate_broker_urls(self, broker_urls) -> set[str]:
        connected = getattr(self, "_connected", None)
        urls = super()._validate_broker_urls(broker_urls)  # the setting is still checked as Celery does
        return {connected} if connected else urls
