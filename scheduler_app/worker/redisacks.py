"""A guard on kombu's Redis ack emulation (kombu.transport.redis.QoS, kombu 5.7.0) for a worker
whose broker connection is lost, as when a Redis Sentinel master dies (docs/operating.md: Redis
Sentinel). install() puts it in place; step.py calls it at worker_init, in the worker's main
process (the one that acknowledges messages and restores them).

What goes wrong without it. On a lost connection Celery's consumer
(celery.worker.consumer.Consumer.on_connection_error_after_connected, Celery 5.7.0) calls
`connection.collect()` and then `connection.close()`. The Redis transport has no `_collect`, so
kombu.connection.Connection.collect closes the channels itself (`_do_close_self`, which swallows
connection errors) and then sets the transport's `client` to None (`_do_close_transport`). With
the master gone the consumer's channel is not closed there: Channel.close first reads the reply
of its pending BRPOP, which raises, and the transport's loop over its channels stops at the
first one that raises (putting back what a channel took and did not acknowledge,
virtual.QoS.restore_unacked_once then QoS.restore_unacked, fails the same way). `close()` then
closes the consumer's channel again: Channel.close drops its pools (Channel._disconnect_pools),
QoS.restore_unacked asks for a client (Channel.conn_or_acquire, Channel.pool), and the new pool's
parameters come from Channel._connparams, which reads `self.connection.client.hostname` with
that client None: AttributeError("'NoneType' object has no attribute 'hostname'"). It is not a
connection error, so kombu's `ignore_errors` lets it through and the worker exits
("Unrecoverable error"). It takes a message taken and not yet acknowledged at that instant and
the loss seen first on another socket than the BRPOP's: in tests/faults/test_sentinel_spike.py
without this guard, 5 runs of 16 stopped a worker, and tests/faults/test_sentinel.py reproduces
it every time. An ack or reject of a message whose channel is closed goes the same way
(QoS.ack, QoS._remove_from_indices, Channel.pool, `self.connection.client` with the channel's
connection None), and one that meets the dead master raises a connection error that kombu logs
with a traceback (kombu.message.Message.ack_log_error).

The guard: restore_unacked, ack and reject send nothing once the channel's transport is closed,
and a connection error they meet is logged in one line instead of raised; either way the
message is forgotten by this channel, which is gone. Nothing is lost by that: a copy the broker
still holds among its unacknowledged messages comes back after the visibility timeout
(CELERY_VISIBILITY_TIMEOUT), and the worker's claim refuses it when its attempt has already run;
a run whose message is gone is still queued in the ledger, and a beat's sweep publishes it again.
"""

from __future__ import annotations

import logging

from kombu.transport.virtual import base as virtual

logger = logging.getLogger("scheduler_app.worker")

# What comes of a message not put back, or not acknowledged: the end of each such line.
COMES_BACK = (
    "a copy the broker still holds comes back after the visibility timeout (the claim refuses an "
    "attempt already run), and a beat's sweep publishes again a run still queued"
)
_original: dict = {}


def install(**_signal) -> None:
    """Put the guard on kombu.transport.redis.QoS (once; a worker_init receiver)."""
    # Here: the Redis client it imports is a large part of a process's start-up, and only the
    # worker needs it.
    from kombu.transport import redis as kombu_redis

    if _original:
        return
    for name, guarded in (("restore_unacked", restore_unacked), ("ack", ack), ("reject", reject)):
        _original[name] = getattr(kombu_redis.QoS, name)
        setattr(kombu_redis.QoS, name, guarded)


def transport_closed(channel) -> bool:
    """The channel's transport was closed (Transport.client None: Connection.collect) or the
    channel itself (connection None): kombu could only fail building a client for it."""
    transport = channel.connection
    return transport is None or transport.client is None


def restore_unacked(self, client=None):
    count = len(self._delivered)
    if client is None and transport_closed(self.channel):
        self._delivered.clear()
        logger.warning("broker connection closed: %d unacknowledged message(s) not put back; %s", count, COMES_BACK)
        return None
    try:
        return _original["restore_unacked"](self, client)
    except self.channel.connection_errors as exc:
        self._delivered.clear()
        logger.warning(
            "broker connection lost (%s: %s): %d unacknowledged message(s) not put back; %s",
            type(exc).__name__,
            exc,
            count,
            COMES_BACK,
        )
        return None


def ack(self, delivery_tag):
    _send_or_forget(self, delivery_tag, "ack", lambda: _original["ack"](self, delivery_tag))


def reject(self, delivery_tag, requeue=False):
    _send_or_forget(
        self,
        delivery_tag,
        "requeue" if requeue else "reject",
        lambda: _original["reject"](self, delivery_tag, requeue=requeue),
    )


def _send_or_forget(qos, delivery_tag, what: str, send) -> None:
    if transport_closed(qos.channel):
        logger.warning("broker connection closed: %s of message %s not sent; %s", what, delivery_tag, COMES_BACK)
    else:
        try:
            return send()
        except qos.channel.connection_errors as exc:
            logger.warning(
                "broker connection lost (%s: %s): %s of message %s not sent; %s",
                type(exc).__name__,
                exc,
                what,
                delivery_tag,
                COMES_BACK,
            )
    virtual.QoS.ack(qos, delivery_tag)  # this channel forgets it, as kombu's own ack does last
    return None
