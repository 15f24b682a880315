"""A loopback HTTP receiver that logs every delivery with its arrival time."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Delivery:
    fire_key: str
    attempt: int
    scheduled_at: datetime
    run_id: int
    job_id: int
    arrived_at: datetime
    path: str = ""  # the URL's path: a job may name itself in its target URL


class Receiver:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                arrived = datetime.now(UTC)
                data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.deliveries.append(
                        Delivery(
                            data["fire_key"],
                            data["attempt"],
                            datetime.fromisoformat(data["scheduled_at"]),
                            data["run_id"],
                            data["job_id"],
                            arrived,
                            self.path,
                        )
                    )
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/deliver"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)
