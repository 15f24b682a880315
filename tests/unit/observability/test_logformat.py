"""CRONFLEET_LOG_FORMAT=json's formatter: one JSON object with the bound context of the run
(run, job, tenant, attempt, fire key, queue, node) and the exception. Real processes writing
it are tested in tests/system/observability/test_logformat.py."""

from __future__ import annotations

import json
import logging
import sys

from scheduler_app.observability import logformat


def record(message: str, **extra) -> logging.LogRecord:
    """A record as logger.info(message, extra=extra) makes it."""
    return logging.makeLogRecord(
        {"name": "scheduler_app.x", "levelno": logging.INFO, "levelname": "INFO", "msg": message, **extra}
    )


def test_the_json_formatter_writes_the_bound_context_and_the_exception():
    logformat.set_node("beat@here:1")
    logformat.bind(run_id=7, job="acme/nightly", tenant="acme", attempt=2, fire_key="job3@x", queue="q")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord("scheduler_app.x", logging.ERROR, __file__, 1, "run %s failed", (7,), sys.exc_info())
    try:
        line = json.loads(logformat.JsonFormatter().format(failed))  # a handler formats as the record is made
    finally:
        logformat.clear()
    plain = logformat.JsonFormatter().format(record("idle", queue="other"))
    logformat.set_node("")

    assert (line["message"], line["level"], line["logger"], line["node"]) == (
        "run 7 failed",
        "ERROR",
        "scheduler_app.x",
        "beat@here:1",
    )
    assert {key: line[key] for key in ("run_id", "job", "tenant", "attempt", "fire_key", "queue")} == {
        "run_id": 7,
        "job": "acme/nightly",
        "tenant": "acme",
        "attempt": 2,
        "fire_key": "job3@x",
        "queue": "q",
    }
    assert line["exception"].startswith("Traceback") and "RuntimeError: boom" in line["exception"]
    assert json.loads(plain)["queue"] == "other" and "run_id" not in json.loads(plain)  # cleared; extra kept
