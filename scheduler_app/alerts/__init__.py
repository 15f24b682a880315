"""Alerts per job: the dead-man's switch (no success within a period plus grace), failed or
dead runs, start lag above a threshold, durations above a maximum or below a minimum, and a
job that paused itself after repeated failure (auto_paused, ledger.autopause); and pauses
that ran out (pauses.py: resumed, or one pause_expired alert, "paused, not healthy").

- rules.py: the rules, one per job, written through rule_set() / rule_delete() by the API,
  the CLI and the admin;
- evaluate.py: the beats evaluate due rules and record alerts, exactly once;
- pauses.py: the beats resume or alert the jobs whose pause ran out, exactly once;
- deliver.py: the alerts are sent by webhook and e-mail, exactly once, with retries.

No extra process: runbeat calls on_beat_turn() after every turn, which evaluates at most
every CRONFLEET_ALERT_CHECK_SECONDS per beat, then wakes the beat's background thread
(start_deliverer), which delivers and then rolls up (roll_ups: the dashboard's minutes,
the stats' hours and the objectives' events, whose statements grow with the fire rate and so
stay off the beat's turns); without one (`runbeat --once`, tests) on_beat_turn does both inline.
"""

from __future__ import annotations

import logging
import time

from scheduler_app.alerts.deliver import (
    DELIVERY_ATTEMPTS,
    Deliverer,
    deliver,
    deliver_pending,
    delivery_status,
    payload,
    where_sent,
)
from scheduler_app.alerts.evaluate import (
    AUTO_PAUSED,
    KINDS,
    check_every,
    claim_due_rules,
    describe,
    describe_seconds,
    evaluate_due_rules,
    evaluate_rule,
    recent_alerts,
    split_message,
)
from scheduler_app.alerts.pauses import Expired, expire_pauses
from scheduler_app.alerts.rules import RULE_DEFAULTS, RULE_FIELDS, rule_delete, rule_set, validate_rule
from scheduler_app.ledger import objectives, rollup
from scheduler_app.models import db_now
from scheduler_app.observability import dashboard

__all__ = [
    "AUTO_PAUSED",
    "DELIVERY_ATTEMPTS",
    "KINDS",
    "RULE_DEFAULTS",
    "RULE_FIELDS",
    "check_every",
    "claim_due_rules",
    "deliver",
    "deliver_pending",
    "delivery_status",
    "describe",
    "describe_seconds",
    "evaluate_due_rules",
    "evaluate_rule",
    "expire_pauses",
    "Expired",
    "on_beat_turn",
    "payload",
    "recent_alerts",
    "roll_ups",
    "rule_delete",
    "rule_set",
    "split_message",
    "start_deliverer",
    "stop_deliverer",
    "validate_rule",
    "where_sent",
]
logger = logging.getLogger(__name__)

_last_check = float("-inf")  # monotonic time of this process's last check
_deliverer: Deliverer | None = None  # this process's delivery thread, if it runs one


def on_beat_turn() -> bool:
    """The beat's hook: evaluate due rules, have pending alerts delivered and roll up the
    dashboard's closed minutes, at most every CRONFLEET_ALERT_CHECK_SECONDS in this process.
    Returns whether it ran."""
    global _last_check
    if time.monotonic() - _last_check < check_every():
        return False
    _last_check = time.monotonic()
    now = db_now()
    raised = evaluate_due_rules(now)
    expired = expire_pauses(now)  # pauses that ran out: resumed, or alerted once
    raised += expired.alerted
    if _deliverer is not None and _deliverer.is_alive():
        _deliverer.wake()
    else:
        deliver_pending(db_now())
        roll_ups()
    if raised:
        logger.info("alerts: raised %s", raised)
    return True


def roll_ups() -> None:
    """The dashboard's per-minute counts, the stats' hourly counts and lag histograms, and the
    fleet objectives' events, up to now (each idempotent across beats)."""
    dashboard.roll_up(db_now())
    rollup.roll_up(db_now())
    objectives.count_events(db_now())


def start_deliverer() -> Deliverer:
    """Start this process's background thread (runbeat does, unless --once)."""
    global _deliverer
    _deliverer = Deliverer(chores=roll_ups)
    _deliverer.start()
    return _deliverer


def stop_deliverer(timeout: float) -> None:
    global _deliverer
    if _deliverer is not None:
        _deliverer.stop(timeout)
        _deliverer = None
