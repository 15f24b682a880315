"""A loopback HTTP receiver that answers each request with the next (status, headers, body) of a
script and logs the requests: the HTTP jobs' tests (tests/integration/targets/test_http_jobs.py,
tests/system/targets/test_http_jobs.py) and the worker's SIGTERM test deliver to it."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Answers each request with the next (status, headers, body) of a script; logs requests."""

    def __init__(self, script, host="127.0.0.1"):
        self.script = list(script)
        self.requests = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                receiver.requests.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
                status, headers, body = receiver.script.pop(0) if receiver.script else (200, {}, b"ok")
                if status == "hang":  # answer only after the caller's deadline
                    time.sleep(headers["seconds"])
                    status, headers = 200, {}
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://{host}:{self.server.server_address[1]}/hook?x=1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
