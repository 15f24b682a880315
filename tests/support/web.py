"""A plain GET to a web server a test started on 127.0.0.1 (gunicorn with the image's
command, or the web server of the JSON-log and Prometheus tests)."""

from __future__ import annotations

import http.client


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": "localhost", **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def get_or_none(port: int, path: str) -> int | None:
    try:
        return get(port, path)[0]
    except OSError:
        return None
