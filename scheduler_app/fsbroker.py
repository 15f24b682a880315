"""The embedded broker: kombu's filesystem transport, with each message written whole.

kombu's filesystem channel opens a message's file under its final name and then writes the
body, so a worker listing the folder in between takes an empty (or half-written) file and
dies on `JSONDecodeError` in the transport's `_get`; its lock is advisory and the reader never
takes it. Here a message is written under a name no queue reads (`….msg.part`) and renamed to
its final name once complete, which POSIX makes atomic within one folder: a reader sees a
message whole or not at all.

project/settings.py points CELERY_BROKER_TRANSPORT here for `filesystem://` URLs.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

PARTIAL = ".part"  # a suffix kombu's `<ms>_<uuid>.<queue>.msg` filter never matches


def message_filename(queue: str, now_ms: int) -> str:
    """kombu's own name, so its `_get`, `_size` and `_purge` find the message (oldest first)."""
    return f"{now_ms}_{uuid.uuid4()}.{queue}.msg"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        final = os.path.join(self.data_folder_out, message_filename(queue, round(monotonic() * 1000)))
        partial = final + PARTIAL
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            try:
                os.unlink(partial)
            except FileNotFoundError:
                pass
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
