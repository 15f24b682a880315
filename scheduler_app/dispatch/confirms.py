"""Publisher confirms on RabbitMQ for the beat's publishes (CRONFLEET_RABBITMQ_CONFIRM_PUBLISH).

publish.py sends a queue's messages on a channel in confirm mode and then waits once, after
the last of them, for the node's confirms: a message the node refused (basic.nack: a full
queue with x-overflow=reject-publish) or did not confirm in time (it died first, a quorum
queue without its majority) raises NotConfirmed, and its runs stay queued in the ledger for
the republish sweep. kombu's own `confirm_publish` transport option waits after every
message, a round trip each, and would put every worker's event publishes in confirm mode too.
"""

from __future__ import annotations

import logging
import time

from kombu.exceptions import KombuError

logger = logging.getLogger(__name__)

# Seconds a publish waits for RabbitMQ's confirms of a queue's messages. A node confirms a
# persistent message once it is on disk (a quorum queue: on a majority's disks), a few
# milliseconds; a quorum queue whose leader died confirms once a new leader is elected.
# Longer than that, and the runs stay queued for the republish sweep.
CONFIRM_TIMEOUT_SECONDS = 10.0


class NotConfirmed(KombuError):
    """RabbitMQ refused (basic.nack) or did not confirm in time messages of a publish."""


class Confirms:
    """Publisher confirms on a channel this module opens and alone publishes on, one per
    broker connection. RabbitMQ numbers a confirm-mode channel's publishes from 1, so a
    delivery tag is the count of this module's publishes on it; on the connection's default
    channel, anyone else's publish would shift the count."""

    def __init__(self, connection) -> None:
        self.connection = connection.connection  # py-amqp's, for this channel's lifetime
        self.channel = connection.channel()
        self.channel.confirm_select()
        self.published = 0
        self.unsettled: set[int] = set()
        self.nacked = 0
        self.channel.events["basic_ack"].add(self._ack)
        self.channel.events["basic_nack"].add(self._nack)

    @classmethod
    def of(cls, connection) -> Confirms:
        """The confirm-mode channel of kombu connection `connection`: made on first use, and
        again after the connection was made anew or the channel closed."""
        connection.ensure_connection(max_retries=1)  # what the pooled producer's first publish would do
        confirms = getattr(connection, "_cronfleet_confirms", None)
        if confirms is None or confirms.connection is not connection.connection or not confirms.channel.is_open:
            confirms = connection._cronfleet_confirms = cls(connection)
        return confirms

    def sent(self) -> None:
        self.published += 1
        self.unsettled.add(self.published)

    def _settle(self, tag: int, multiple: bool) -> int:
        settled = {t for t in self.unsettled if t <= tag} if multiple else self.unsettled & {tag}
        self.unsettled -= settled
        return len(settled)

    def _ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple)

    def _nack(self, tag: int, multiple: bool) -> None:
        self.nacked += self._settle(tag, multiple)

    def wait(self, timeout: float) -> None:
        """Return once the node confirmed every message published on the channel; raise
        NotConfirmed if it refused one, or when `timeout` seconds pass first."""
        deadline = time.monotonic() + timeout
        while self.unsettled and (remaining := deadline - time.monotonic()) > 0:
            try:
                self.connection.drain_events(timeout=remaining)  # hands the confirms to _ack and _nack
            except TimeoutError:  # socket.timeout
                break
        if self.unsettled:
            raise NotConfirmed(f"{len(self.unsettled)} message(s) not confirmed within {timeout:g} s")
        if self.nacked:
            refused, self.nacked = self.nacked, 0
            raise NotConfirmed(f"the broker refused {refused} message(s) (basic.nack)")

    def discard(self) -> None:
        """Close the channel after a failed publish: confirms of it may still come, and the
        next publish must not take them for its own."""
        self.unsettled.clear()
        try:
            if self.channel.is_open:
                self.channel.close()
        except Exception:  # noqa: BLE001 - the connection may be gone too: the channel is dropped either way
            logger.debug("closing the confirm channel failed", exc_info=True)
        self.channel.is_open = False
