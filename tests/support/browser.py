"""A minimal W3C WebDriver client for Debian's chromedriver (standard library only): enough
to drive headless Chromium through the admin, read what it shows and take screenshots."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def available() -> bool:
    return bool(shutil.which("chromedriver") and (shutil.which("chromium") or shutil.which("chromium-browser")))


class Browser:
    def __init__(self, width: int = 1280, height: int = 900) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.profile = tempfile.mkdtemp(prefix="cf-chromium-")
        self.driver = subprocess.Popen(
            [shutil.which("chromedriver"), f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": binary,
                        "args": [*CHROME_FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}"],
                    },
                }
            }
        }
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["value"]

    def cmd(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self.cmd("POST", "/url", {"url": url})

    def js(self, script: str, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def log_in(self, url: str, username: str, password: str, *, until: str, what: str = "the login") -> None:
        """Submit the admin's login form at `url`, then wait (5 s at most) for the JavaScript
        expression `until` to be true on the page it leads to."""
        self.get(url)
        self.js(
            "document.querySelector('#id_username').value = arguments[0];"
            "document.querySelector('#id_password').value = arguments[1];"
            "document.querySelector('#login-form').submit();",
            username,
            password,
        )
        for _ in range(50):
            if self.js(f"return !!({until})"):
                return
            time.sleep(0.1)
        raise AssertionError(f"{what} failed: {until} never held")

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.cmd("GET", "/screenshot")))
        return path

    def close(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)
