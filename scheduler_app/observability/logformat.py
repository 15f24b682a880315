"""Structured logs: with CRONFLEET_LOG_FORMAT=json every line a process writes is one JSON
object, with what it is about: the run id, job, tenant, attempt, fire key and queue where
they apply, and always the node (the process) that wrote it.

- Beats and the web: settings.LOGGING puts JsonFormatter on the root logger's handler, so
  Django's and the libraries' records come out the same way; gunicorn's own error and
  access logs through project/gunicorn.conf.py (json_logconfig).
- Workers: Celery installs its own handlers; use_json_in_celery() swaps their formatter
  once Celery has set logging up, and the worker skips its banner.
- A record's context comes from bind() (a context variable: per thread and per task) and
  from the fields a call passes as `extra`.

Plain text stays the default. Imports nothing of Django or the project: gunicorn's master
loads this before any application.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import traceback
from contextvars import ContextVar
from datetime import UTC, datetime

# What a record may say about its subject; kept in this order at the front of each line.
FIELDS = ("run_id", "job", "tenant", "attempt", "fire_key", "target", "queue", "task_id")
_context: ContextVar[dict] = ContextVar("cronfleet_log_context", default={})  # noqa: B039 (never changed in place: set() replaces it)
_node = ""


def set_node(name: str) -> None:
    """Name this process in every record (a beat's beat@host:pid, a worker's node name)."""
    global _node
    _node = name


def node() -> str:
    return _node or f"{socket.gethostname()}:{os.getpid()}"


def bind(**fields) -> None:
    """Add `fields` (None values ignored) to the context of the records that follow in this
    thread or task, until clear()."""
    _context.set({**_context.get(), **{key: value for key, value in fields.items() if value is not None}})


def clear() -> None:
    _context.set({})


def bind_delivery(request) -> None:
    """At the start of an execute_run delivery: what its message says (run, attempt, queue)."""
    args = list(getattr(request, "args", None) or ()) + [None, None]
    info = getattr(request, "delivery_info", None) or {}
    _context.set(
        {
            "run_id": args[0],
            "attempt": args[1],
            "queue": info.get("routing_key") or None,
            "task_id": getattr(request, "id", None),
        }
    )
    if getattr(request, "hostname", None):
        set_node(request.hostname)


def bind_started(started) -> None:
    """Once a run has started: its job, tenant and fire key (an execution.Started)."""
    run = started.run
    bind(
        run_id=run.id,
        attempt=run.attempt,
        job=f"{started.tenant}/{started.job.name}",
        tenant=started.tenant,
        fire_key=run.fire_key,
        target=started.job.task_name or started.job.target_kind,
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC), level, logger, message, node, pid, then the
    context's fields and any of FIELDS passed as `extra`, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "node": node(),
            "pid": record.process,
        }
        context = _context.get()
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is None:
                value = context.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, default=str, ensure_ascii=False)


def json_wanted() -> bool:
    return (os.environ.get("CRONFLEET_LOG_FORMAT") or "plain").strip().lower() == "json"


def use_json_in_celery(logger=None, **kwargs) -> None:
    """after_setup_logger / after_setup_task_logger receiver: Celery's handlers write JSON."""
    if not json_wanted() or logger is None:
        return
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())


def json_say(msg: str, f=sys.__stderr__) -> None:
    """celery.apps.worker.safe_say in JSON: what the worker's signal handlers print (warm
    shutdown, ...), written as safe_say does, with one os.write and no lock."""
    line = {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "level": "WARNING",
        "logger": "celery.apps.worker",
        "message": str(msg),
        "node": node(),
        "pid": os.getpid(),
    }
    os.write(f.fileno(), (json.dumps(line, ensure_ascii=False) + "\n").encode())


def use_json_in_celery_worker() -> None:
    """A worker's own prints as JSON too: its signal handlers' messages (json_say) and Python
    warnings (through the logging they are then captured by)."""
    import celery.apps.worker  # only in a worker: the module sets up a worker's console

    celery.apps.worker.safe_say = json_say
    logging.captureWarnings(True)


def json_logconfig() -> dict:
    """gunicorn's logconfig_dict: its error and access logs as JsonFormatter lines on stderr
    and stdout (where gunicorn writes them by default with accesslog = errorlog = "-")."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "scheduler_app.observability.logformat.JsonFormatter"}},
        "handlers": {
            "error": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
            "access": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"},
        },
        "root": {"handlers": ["error"], "level": "WARNING"},  # until Django's LOGGING takes over
        "loggers": {
            "gunicorn.error": {"handlers": ["error"], "level": "INFO", "propagate": False},
            "gunicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }
