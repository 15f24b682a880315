"""Helpers for the alert tests (tests/integration/alerts/, tests/system/alerts/): a finished run
of a job at a given time, a rule armed to be checked now, and a local webhook receiver that
verifies each alert's signature."""

from __future__ import annotations

import http.server
import json
import threading
import time
from datetime import datetime, timedelta

from scheduler_app import alerts
from scheduler_app.http import signing as webhooks
from scheduler_app.models import AlertRule, Job, JobRun


def run_of(job: Job, at: datetime, state: str, *, lag: float = 1.0, took: float = 5.0, **fields) -> JobRun:
    return JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=at,
        state=state,
        created_at=at,
        started_at=at + timedelta(seconds=lag),
        finished_at=at + timedelta(seconds=lag + took),
        **fields,
    )


def arm(job: Job, now: datetime, **changes) -> AlertRule:
    rule = alerts.rule_set(job, changes, actor="test")
    AlertRule.objects.filter(id=rule.id).update(
        checked_until=now - timedelta(hours=1),
        next_check_at=now,
        last_success_at=rule.last_success_at and now - timedelta(hours=1),
    )
    rule.refresh_from_db()
    return rule


class Receiver(http.server.ThreadingHTTPServer):
    """Collects the alerts POSTed to it, verifying each signature."""

    def __init__(self, secrets: list[str]):
        self.secrets, self.received, self.bad = secrets, [], []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    webhooks.verify(outer.secrets, dict(self.headers), body, now=int(time.time()))
                    outer.received.append(json.loads(body))
                except webhooks.InvalidSignature as exc:
                    outer.bad.append(exc.reason)
                outer.took()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def took(self) -> None:
        """Called after each alert is taken, before the answer."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/alerts"
