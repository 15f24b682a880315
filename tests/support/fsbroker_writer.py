"""The writer process of tests/system/dispatch/test_fsbroker.py, and the connection both sides use.

It imports the transport and kombu only, not Django: the writer runs as `python -c`.
"""

from __future__ import annotations

from pathlib import Path

from kombu import Connection

from scheduler_app import fsbroker


def connection(folder: Path) -> Connection:
    return Connection(
        "filesystem://",
        transport=fsbroker.Transport,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "control_folder": str(folder / "control"),
        },
    )


def put_all(folder: Path, messages: int, size: int) -> None:
    with connection(folder) as conn:
        channel = conn.default_channel
        for n in range(messages):
            channel._put("q", {"n": n, "body": "x" * size})
