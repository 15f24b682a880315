"""Readiness: can this deployment schedule work right now?

- GET /healthz (healthz): the web process answers and reaches the database. A
  liveness probe: restarting the web process is the cure for nothing else.
- GET /readyz: the database and the broker answer, and at least one beat is live (seen
  within its own bound, nodes.beat_stale_after: 2 x --max-sleep + 5 s). A readiness probe
  or an alert: no live beat means no fire is dispatched, which restarting the web process
  does not fix, so never use it as a liveness probe.

Both answer JSON; 200 when all is well, 503 naming what is not.

- GET /metrics: Prometheus exposition of the cluster's gauges (cluster.py), of the check-ins'
  statuses (checks.py), of the fleet objectives (objectives.py), of the web's
  own counters (pings dropped), and of the beats' and workers' counters that share this
  host's PROMETHEUS_MULTIPROC_DIR (metrics.py).
  They name nodes (host and pid) and the queues tenants chose, so with CRONFLEET_METRICS_TOKEN
  set (docker-compose.yml requires one) only `Authorization: Bearer <token>` is answered; any
  other request gets 401. Without a token (development, tests, the first run) it is open, and
  the process says so in its log once. docs/operating-tls.md has what each port exposes.
"""

from __future__ import annotations

import hmac
import logging

from celery import current_app as app
from django.db import DatabaseError, connection
from django.http import HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler_app.conf import app_settings
from scheduler_app.models import NodeKind, db_now
from scheduler_app.observability import metrics
from scheduler_app.observability.checks import CheckCollector
from scheduler_app.observability.cluster import ClusterCollector
from scheduler_app.observability.errors import answers_server_errors
from scheduler_app.observability.forecast import ForecastCollector
from scheduler_app.observability.nodes import node_states
from scheduler_app.observability.objectives import ObjectiveCollector
from scheduler_app.queues import broker_errors

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_SECONDS = 2.0


@answers_server_errors(text=True)
def healthz(request):
    """200 when the database answers; 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:  # the database is down or refusing us: say which error
        return JsonResponse({"status": "error", "database": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ok"})


def check_database() -> str:
    """'ok', or the class name of the error the database gave."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return type(exc).__name__
    return "ok"


def check_broker() -> str:
    """'ok' when a connection to the broker opens within BROKER_TIMEOUT_SECONDS, else the
    class name of the error."""
    try:
        with app.connection_for_write(connect_timeout=BROKER_TIMEOUT_SECONDS) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT_SECONDS)
            conn.default_channel  # Redis: the transport talks to the server only now  # noqa: B018
    except broker_errors() as exc:
        return type(exc).__name__
    return "ok"


def readiness() -> tuple[bool, dict]:
    """(ready, what was found): the database, the broker and the beats."""
    found: dict = {"database": check_database(), "broker": check_broker()}
    if found["database"] == "ok":
        try:
            beats = node_states(db_now(), kind=NodeKind.BEAT)
        except DatabaseError as exc:
            found["database"] = type(exc).__name__
        else:
            live = [beat for beat in beats if beat.live]
            found["beats"] = {"live": len(live), "stale": sum(1 for beat in beats if beat.state == "stale")}
            if not live:
                found["beats"]["error"] = "no beat seen within its bound (2 x --max-sleep + 5 s)"
    ready = found["database"] == "ok" and found["broker"] == "ok" and found.get("beats", {}).get("live", 0) > 0
    return ready, found


@answers_server_errors(text=True)
def readyz(request):
    ready, found = readiness()
    return JsonResponse({"status": "ok" if ready else "error", **found}, status=200 if ready else 503)


_said_open = False


def metrics_authorized(request) -> bool:
    """Whether this request may read /metrics: any, without a token; else only the token's."""
    global _said_open
    token = app_settings.METRICS_TOKEN
    if not token:
        if not _said_open:
            _said_open = True
            logger.warning("/metrics answers without a token: set CRONFLEET_METRICS_TOKEN (docs/operating-tls.md)")
        return True
    given = request.headers.get("Authorization", "").encode()
    return hmac.compare_digest(given, f"Bearer {token}".encode())


class WebCollector:
    """The counters the web's processes keep (metrics.WEB_FAMILIES), for a web without
    PROMETHEUS_MULTIPROC_DIR: this process's own counts (with the directory, every process's
    are in its files, added up)."""

    def collect(self):
        for family in metrics.WEB_FAMILIES:
            yield from family.collect()


@answers_server_errors(text=True)
def metrics_view(request):
    if not metrics_authorized(request):
        response = HttpResponse(
            "metrics need Authorization: Bearer <CRONFLEET_METRICS_TOKEN>\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="cronfleet-metrics"'
        return response
    registry = CollectorRegistry()
    registry.register(ClusterCollector())
    registry.register(ForecastCollector())
    registry.register(CheckCollector())
    registry.register(ObjectiveCollector())
    if metrics.MULTIPROC_DIR:
        registry.register(metrics.LiveProcessesCollector(None, metrics.MULTIPROC_DIR))
    else:  # the web's own counters (pings dropped), as the process that answers counted them
        registry.register(WebCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
