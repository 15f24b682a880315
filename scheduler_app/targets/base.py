"""What every target kind shares: how an attempt says it failed, and how a result becomes
the text stored on the run.

A target's perform() returns its result or raises: PermanentFailure when another attempt
cannot help, RetryableFailure when one may; any other exception is the target's own error,
retried by the job's policy (worker/execution.py classifies them).
"""

from __future__ import annotations

import json


class PermanentFailure(Exception):
    """A failure that another attempt cannot fix (the task is not allowed, a 4xx answer, an
    address the SSRF guard refuses). `pause_note` set: also pause the job (410 Gone)."""

    def __init__(self, message: str, *, pause_note: str = "") -> None:
        super().__init__(message)
        self.pause_note = pause_note


class RetryableFailure(Exception):
    """A failure another attempt may not meet (5xx, 429, timeouts, connection errors).
    `retry_after`: seconds the target asked us to wait (429 Retry-After), bounded later."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def to_text(result) -> str:
    """A result as the text kept on the run: JSON where it can be, else its repr."""
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str, sort_keys=True)
    except (TypeError, ValueError):
        return repr(result)
