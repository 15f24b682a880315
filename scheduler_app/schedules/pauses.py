"""Pauses that expire, as arithmetic (docs/pauses.md). No database, no clock, no Django.

- pause_problem: whether an expiry asked for makes sense (the field at fault and why);
- expiry_due: what a paused job's expiry asks for at `now` (resume, alert, or nothing);
- set_fingerprint: the fingerprint a bulk pause's approval is bound to, of the exact set of
  jobs (as schedules as code binds an apply to its plan's fingerprint).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timedelta

EXPIRIES = ("resume", "alert")
DEFAULT_EXPIRY = "alert"  # a pause that runs out says so: silence is not health
MAX_PAUSE = timedelta(days=366)  # the furthest a pause may say it ends


def pause_problem(until: datetime | None, expiry: str, now: datetime) -> tuple[str, str] | None:
    """(field, message) when `until` and `expiry` do not make a pause's end, else None.
    An expiry needs an end; an end must be after `now` and within MAX_PAUSE."""
    if expiry and expiry not in EXPIRIES:
        return "on_expiry", f"must be one of {', '.join(EXPIRIES)}"
    if until is None:
        return ("on_expiry", "needs until (when the pause ends)") if expiry else None
    if until.tzinfo is None:
        return "until", "must name its offset or zone (e.g. 2026-12-07T09:00:00Z)"
    if until <= now:
        return "until", f"must be in the future (now is {now.isoformat()})"
    if until - now > MAX_PAUSE:
        return "until", f"must be at most {MAX_PAUSE.days} days ahead"
    return None


def expiry_due(
    *, enabled: bool, until: datetime | None, expiry: str, alerted_at: datetime | None, now: datetime
) -> str | None:
    """What a job's pause asks for at `now`: "resume", "alert" (once: not after it was
    raised), or None (running, no end, not yet ended)."""
    if enabled or until is None or until > now or alerted_at is not None:
        return None
    return "resume" if expiry == "resume" else "alert"


def set_fingerprint(scope: str, job_ids: Iterable[int]) -> str:
    """Of the scope's name and the exact set of job ids: a job joining or leaving the set
    (made, tagged, resumed, paused meanwhile) changes it; the order of the ids does not."""
    text = json.dumps({"scope": scope, "jobs": sorted(set(job_ids))}, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
