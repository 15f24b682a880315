"""Celery messages pushed to kombu's Redis transport as that transport writes them, without
its per-message machinery.

kombu's `Producer.publish` costs the beat about five times a bare LPUSH a message: it
serializes the body, copies the properties, makes a uuid4 for the delivery tag, encodes the
body in base64, looks up the priority's list and serializes the whole envelope again, all
in Python. Here the envelope of a (task, time limit, queue, priority) is serialized once,
with markers where a message differs (its body, id, argument repr, shadow name and delivery
tag), and each message is that text with its values spliced in. What lands in the list is
what kombu's virtual channel would have put there (`prepare_message`, `basic_publish`,
Redis `_put`); tests/integration/dispatch/test_rediswire.py holds one beside the other.

A queue declared with an expiry (kombu's `x-expires`, which its `_put` renews on every
push) is left to kombu.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import uuid
from collections.abc import Iterable

# A marker's serialized form: json.dumps writes the control character as \u0001.
_MARK = "\x01"
_MARKED = re.compile(r'"\\u0001(\w)"')
BODY, TASK_ID, ARGSREPR, SHADOW, TAG = "B", "I", "A", "S", "T"
_encode = json.JSONEncoder().encode  # json.dumps's own encoder: kombu's json serializer writes the same text
_quote = json.encoder.encode_basestring_ascii  # a JSON string, as json.dumps writes it


class RedisWire:
    """Envelopes for one kombu Redis channel, serialized once per template and spliced."""

    def __init__(self, channel) -> None:
        self.channel = channel
        self._envelopes: dict[tuple, tuple[str, list[str], list[str], str]] = {}
        # Unique like kombu's uuid4 tags (one uuid4 an instance, then a count; a forked process
        # makes instances of its own): a tag keys the message's entry in the unacked hash.
        prefix = str(uuid.uuid4())
        self._tags = (f"{prefix}-{n}" for n in itertools.count())

    def handles(self, queue: str) -> bool:
        """False for a queue whose lists kombu renews the expiry of on every push."""
        return not (self.channel._expires and queue in self.channel._expires)

    def push(self, queue: str, messages: Iterable[tuple[tuple, dict, dict, int]], *, batch: int) -> int:
        """LPUSH each (body, headers, properties, broker priority) to `queue`'s list for its
        priority, `batch` pushes a pipelined round trip. Returns how many were pushed."""
        pushed = 0
        with self.channel.conn_or_acquire() as client, client.pipeline(transaction=False) as pipe:
            for body, headers, properties, priority in messages:
                key, text = self.encode(queue, body, headers, properties, priority)
                pipe.lpush(key, text)
                pushed += 1
                if pushed % batch == 0:
                    pipe.execute()
            pipe.execute()
        return pushed

    def encode(self, queue: str, body: tuple, headers: dict, properties: dict, priority: int) -> tuple[str, str]:
        """(the Redis list, the envelope's JSON) of one message. `headers` and `properties`
        are a template's with the message's id, root_id, argsrepr, shadow and correlation_id;
        `body` is (args, kwargs, embed), of which only the args differ within a template."""
        shape = (queue, priority, headers["task"], tuple(headers["timelimit"] or ()))
        if shape not in self._envelopes:
            self._envelopes[shape] = self._envelope(queue, body, headers, properties, priority)
        key, texts, marks, body_rest = self._envelopes[shape]
        shadow = headers["shadow"]
        values = {
            BODY: base64.b64encode(f"[{_encode(body[0])}{body_rest}".encode()).decode().join('""'),
            TASK_ID: _quote(headers["id"]),
            ARGSREPR: _quote(headers["argsrepr"]),
            SHADOW: "null" if shadow is None else _quote(shadow),
            TAG: _quote(next(self._tags)),
        }
        parts = [texts[0]]
        for mark, text in zip(marks, texts[1:]):
            parts.append(values[mark])
            parts.append(text)
        return key, "".join(parts)

    def _envelope(self, queue: str, body: tuple, headers: dict, properties: dict, priority: int):
        """The message kombu's virtual channel makes, with markers in place of what differs
        from one message to the next, split at them: (its list, the texts between the
        markers, the markers, the body's JSON after its args)."""
        envelope = {
            "body": _MARK + BODY,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {
                **headers,
                "id": _MARK + TASK_ID,
                "root_id": _MARK + TASK_ID,
                "argsrepr": _MARK + ARGSREPR,
                "shadow": _MARK + SHADOW,
            },
            "properties": {
                **properties,
                "correlation_id": _MARK + TASK_ID,
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": priority,
                "body_encoding": "base64",
                "delivery_tag": _MARK + TAG,
            },
        }
        pieces = _MARKED.split(json.dumps(envelope))
        body_rest = "".join(f", {_encode(part)}" for part in body[1:]) + "]"
        return self.channel._q_for_pri(queue, priority), pieces[0::2], pieces[1::2], body_rest
