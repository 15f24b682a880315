"""Gunicorn settings for Cronfleet's web process (the API, the admin, /healthz).

    gunicorn -c project/gunicorn.conf.py

A fixed number of processes, each with a fixed number of threads: at most
CRONFLEET_WEB_WORKERS x CRONFLEET_WEB_THREADS requests run at once, and each process keeps a
database pool of one connection per thread (DB_POOL_MAX_SIZE, set here), so the web process
never holds more than that many PostgreSQL connections, however many clients call. Requests
beyond that wait in the listen backlog instead of opening connections.
"""

import os


def env_count(name: str, default: int) -> int:
    raw = os.environ.get(name) or str(default)
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"gunicorn: {name} must be a whole number of at least 1, got {raw!r}")
    return int(raw)


wsgi_app = "project.wsgi:application"
bind = os.environ.get("CRONFLEET_WEB_BIND") or "0.0.0.0:8000"
workers = env_count("CRONFLEET_WEB_WORKERS", 2)
threads = env_count("CRONFLEET_WEB_THREADS", 4)
worker_class = "gthread"
# Read by project/settings.py in each worker: one pooled connection per thread, so a request
# never waits for a connection and the process never holds more.
os.environ["DB_POOL_MAX_SIZE"] = str(threads)
# The application (and its pool) is loaded in each worker after the fork, never shared.
preload_app = False
timeout = 30  # a worker silent this long is killed and replaced (statement_timeout is 60 s)
graceful_timeout = 30
keepalive = 5
# Replace a worker now and then, so a slow leak cannot grow for ever.
max_requests = 10_000
max_requests_jitter = 1_000
# Gunicorn's control socket (one per user's home by default) is not used.
control_socket_disable = True
accesslog = "-"
errorlog = "-"
if (os.environ.get("CRONFLEET_LOG_FORMAT") or "").strip().lower() == "json":  # one JSON object a line
    from scheduler_app.observability.logformat import json_logconfig

    logconfig_dict = json_logconfig()
