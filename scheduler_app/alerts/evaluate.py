"""Evaluating alert rules, exactly once with any number of beats:

- a beat claims the rules due for a check with FOR UPDATE SKIP LOCKED (claim_due_rules), so
  one beat at a time evaluates a rule; it looks at the runs that started or ended since the
  rule's checked_until and moves checked_until on in the same transaction;
- each alert has a unique dedup_key (the run and attempt; for no_success the silence's
  start), inserted with ON CONFLICT DO NOTHING: the same thing is never recorded twice;
- the cool-down (per rule and kind) is judged under the rule's row lock: alerts held back by
  it are counted on the last alert (`suppressed`), not recorded; it is at least
  CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS whatever the rule says;
- over its tenant's hourly budget an alert is recorded as suppressed, with the reason, and
  never sent (budget.py).

Records alerts only; deliver.py sends them.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Q

from scheduler_app.alerts.budget import BUDGET_CHANNEL, alert_budget_exceeded, min_cooldown, suppressed_entry
from scheduler_app.alerts.recovery import CHECKIN_UP, recovery_of
from scheduler_app.conf import app_settings
from scheduler_app.ledger.lags import run_start_lag
from scheduler_app.models import Alert, AlertKind, AlertRule, Job, JobRun, RunState, Trigger

RULES_PER_CHECK = 200  # rules one beat evaluates per check
RUNS_PER_RULE = 500  # runs looked at per rule per check (the rest wait for the next check)
ALERTS_PER_RULE = 10  # alerts one rule may raise per check
LOOKBACK = timedelta(days=1)  # a run ending now was fired at most this long ago (retries included)
FAILED_STATES = (RunState.FAILED, RunState.DEAD)
# A job that paused itself after repeated failure (ledger.autopause): raised once per pause
# (its dedup key is the pause's instant) on any enabled rule of the job, and never held back
# by the cool-down (each pause waits for a person's resume, so they cannot flood).
AUTO_PAUSED = AlertKind.AUTO_PAUSED
KINDS = tuple(AlertKind.values)


def check_every() -> float:
    return float(app_settings.ALERT_CHECK_SECONDS)


def claim_due_rules(now: datetime, *, limit: int) -> list[AlertRule]:
    """Lock the enabled rules due for a check; rules another beat holds are skipped.
    Call inside a transaction."""
    rules = AlertRule.objects.filter(enabled=True, next_check_at__lte=now).order_by("next_check_at")
    if connection.features.has_select_for_update_skip_locked:
        rules = rules.select_for_update(skip_locked=True, of=("self",))
    return list(rules.select_related("job__tenant")[:limit])


def evaluate_due_rules(now: datetime, *, limit: int = RULES_PER_CHECK) -> int:
    """Check every due rule once; return how many alerts were recorded. One transaction:
    the claims, the new alerts and the moved checked_until commit together."""
    raised = 0
    with transaction.atomic():
        for rule in claim_due_rules(now, limit=limit):
            raised += evaluate_rule(rule, now)
    return raised


def evaluate_rule(rule: AlertRule, now: datetime) -> int:
    """Look at the runs of the rule's job that started or ended in (checked_until, now];
    record what breaks the rule; move checked_until and next_check_at on. Under its lock."""
    job, since = rule.job, rule.checked_until
    runs = list(
        JobRun.objects.filter(job=job, scheduled_at__gt=since - LOOKBACK, scheduled_at__lte=now)
        .filter(Q(finished_at__gt=since, finished_at__lte=now) | Q(started_at__gt=since, started_at__lte=now))
        .order_by("scheduled_at")
        .only("id", "scheduled_at", "trigger", "state", "attempt", "enqueued_at", "started_at", "finished_at", "error")[
            :RUNS_PER_RULE
        ]
    )
    until = now if len(runs) < RUNS_PER_RULE else max(max(r.started_at or since, r.finished_at or since) for r in runs)
    found = []
    for run in runs:
        found.extend(run_findings(rule, run, since, until))
    successes = [
        run.finished_at
        for run in runs
        if run.state == RunState.SUCCEEDED and run.finished_at and run.finished_at <= until
    ]
    if successes:
        rule.last_success_at = max([*successes, rule.last_success_at or successes[0]])
    if rule.no_success_seconds is not None:
        silent_since = rule.last_success_at or rule.created_at
        limit = timedelta(seconds=rule.no_success_seconds + rule.grace_seconds)
        if now - silent_since > limit:
            found.append(
                (
                    AlertKind.NO_SUCCESS,
                    f"since:{silent_since.isoformat()}",
                    None,
                    compose(
                        f"no successful run for {describe(now - silent_since)} "
                        f"(expected one every {describe(timedelta(seconds=rule.no_success_seconds))} "
                        f"+ {describe(timedelta(seconds=rule.grace_seconds))} grace)",
                        f"job {job}",
                    ),
                    {"last_success_at": rule.last_success_at.isoformat() if rule.last_success_at else None},
                )
            )
    found.extend(auto_pause_findings(rule))
    raised = sum(record_alert(rule, now, *finding) for finding in found[:ALERTS_PER_RULE])
    # After the others: a down alert recorded just now is one a success in this window answers.
    raised += sum(record_alert(rule, now, *finding) for finding in recovery_findings(rule, runs, until))
    rule.checked_until = until
    rule.next_check_at = now + timedelta(seconds=check_every())
    AlertRule.objects.filter(id=rule.id).update(
        checked_until=until, next_check_at=rule.next_check_at, last_success_at=rule.last_success_at
    )
    return raised


def run_findings(rule: AlertRule, run: JobRun, since: datetime, until: datetime) -> list[tuple]:
    """(kind, subject, run id, message, detail) for each way `run` breaks `rule`, judged on
    the transition that happened in (since, until]."""
    job, found = rule.job, []
    ended = run.finished_at is not None and since < run.finished_at <= until
    started = run.started_at is not None and since < run.started_at <= until
    subject = f"run{run.id}:a{run.attempt}"
    if rule.on_failure and ended and run.state in FAILED_STATES:
        found.append(
            (
                AlertKind.FAILED,
                subject,
                run.id,
                compose(
                    f"{run.state} on attempt {run.attempt}: {run.error[:300]}",
                    f"run {run.id} ({run.scheduled_at:%Y-%m-%d %H:%M:%S}Z) of {job}",
                ),
                {"state": run.state, "error": run.error[:2000]},
            )
        )
    if rule.max_start_lag_seconds is not None and started and run.trigger == Trigger.SCHEDULE and run.attempt == 1:
        lag = run_start_lag(run)
        assert lag is not None  # started: run.started_at is set
        if lag > rule.max_start_lag_seconds:
            shown, limit = seconds_pair(lag, rule.max_start_lag_seconds)
            found.append(
                (
                    AlertKind.START_LAG,
                    subject,
                    run.id,
                    compose(f"started {shown} after its fire time (more than {limit})", f"run {run.id} of {job}"),
                    {"start_lag_seconds": lag},
                )
            )
    if ended and run.started_at is not None and run.state not in (RunState.SKIPPED, RunState.CANCELLED):
        took = (run.finished_at - run.started_at).total_seconds()
        if rule.max_duration_seconds is not None and took > rule.max_duration_seconds:
            shown, limit = seconds_pair(took, rule.max_duration_seconds)
            found.append(
                (
                    AlertKind.TOO_LONG,
                    subject,
                    run.id,
                    compose(f"took {shown} (more than {limit})", f"run {run.id} of {job}"),
                    {"duration_seconds": took},
                )
            )
        if (
            rule.min_duration_seconds is not None
            and took < rule.min_duration_seconds
            and run.state == RunState.SUCCEEDED
        ):
            shown, limit = seconds_pair(took, rule.min_duration_seconds)
            found.append(
                (
                    AlertKind.TOO_SHORT,
                    subject,
                    run.id,
                    compose(f"took only {shown} (less than {limit})", f"run {run.id} of {job}"),
                    {"duration_seconds": took},
                )
            )
    return found


def recovery_findings(rule: AlertRule, runs: list[JobRun], until: datetime) -> list[tuple]:
    """The "back up" finding of a monitored job's successful check-in that answers its newest
    down alert (recovery.py), keyed on that alert: one per down alert, whatever the cool-down."""
    job, found = rule.job, []
    for run in runs:
        if run.state != RunState.SUCCEEDED or run.finished_at is None or run.finished_at > until:
            continue
        back = recovery_of(job, run)
        if back is None:
            continue
        down_for = back.back_at - back.down_since
        found.append(
            (
                CHECKIN_UP,
                f"down{back.down_alert_id}",
                run.id,
                compose(
                    f"back up after {describe(down_for)}: a successful check-in at {back.back_at:%Y-%m-%d %H:%M:%S}Z",
                    f"job {job}",
                ),
                {
                    "down_alert_id": back.down_alert_id,
                    "down_since": back.down_since.isoformat(),
                    "back_at": back.back_at.isoformat(),
                    "down_seconds": round(down_for.total_seconds(), 3),
                },
            )
        )
    return found[:1] if found else []


def auto_pause_findings(rule: AlertRule) -> list[tuple]:
    """The finding of the job's pause after repeated failure, while it is paused so and the
    pause came after the rule was made. Judged on the job's row, not on a window of time: a
    pause committed after its instant was read past is still found; its dedup key (the
    pause's instant) makes it one alert."""
    job = rule.job
    if job.enabled or job.auto_paused_at is None or job.auto_paused_at < rule.created_at:
        return []
    return [
        (
            AUTO_PAUSED,
            f"at:{job.auto_paused_at.isoformat()}",
            None,
            compose(job.paused_note, f"job {job}"),
            {
                "auto_paused_at": job.auto_paused_at.isoformat(),
                "consecutive_failures": job.consecutive_failures,
                "pause_after_failures": job.pause_after_failures,
                "note": job.paused_note,
            },
        )
    ]


# An alert's message is its reason, then what it is about: "<reason> — <run, job>". The reason
# comes first so that a list cutting the message short still shows it (split_message()).
CONTEXT_MARK = " — "


def compose(reason: str, context: str) -> str:
    """An alert's message: the reason, whole, then the context (cut at the column's 1000)."""
    reason = " ".join(reason.split()) or "(no reason given)"
    return f"{reason}{CONTEXT_MARK}{context}"


def split_message(message: str) -> tuple[str, str]:
    """(reason, context) of a message compose() built; ("", message) for one recorded before
    messages led with their reason (those read "<tenant>/<job>: ...")."""
    reason, mark, context = message.partition(CONTEXT_MARK)
    return (reason, context) if mark else ("", message)


def record_alert(
    rule: AlertRule, now: datetime, kind: str, subject: str, run_id: int | None, message: str, detail: dict
) -> int:
    """Record one alert unless its dedup_key exists (1) or the cool-down holds it back (0)."""
    last = (
        Alert.objects.filter(job_id=rule.job_id, kind=kind)
        .order_by("-raised_at")
        .values("id", "raised_at", "dedup_key")
        .first()
    )
    key = f"job{rule.job_id}:{kind}:{subject}"
    if last is not None and last["dedup_key"] == key:
        return 0
    cooldown = timedelta(seconds=max(rule.cooldown_seconds, min_cooldown()))
    # A pause waits for a person's resume and a recovery answers one down alert: neither floods.
    if last is not None and now - last["raised_at"] < cooldown and kind not in (AUTO_PAUSED, CHECKIN_UP):
        Alert.objects.filter(id=last["id"]).update(suppressed=F("suppressed") + 1)
        return 0
    # Over the tenant's hourly budget: recorded, with the reason, and never sent (no next_delivery_at).
    over = alert_budget_exceeded(rule.job.tenant_id, now)
    log = [suppressed_entry(BUDGET_CHANNEL, now, over)] if over else []
    with connection.cursor() as cursor:  # the unique key decides; a second beat's insert does nothing
        cursor.execute(
            INSERT_ALERT,
            {
                "rule": rule.id,
                "job": rule.job_id,
                "tenant": rule.job.tenant_id,
                "kind": kind,
                "key": key[:200],
                "run": run_id,
                "message": message[:1000],
                "detail": json.dumps(detail),
                "now": now,
                "next_delivery": None if over else now,
                "log": json.dumps(log),
            },
        )
        return cursor.rowcount


INSERT_ALERT = """
INSERT INTO scheduler_app_alert (rule_id, job_id, tenant_id, kind, dedup_key, run_id, message, detail, raised_at,
                                 suppressed, delivery_attempts, next_delivery_at, delivery_log)
VALUES (%(rule)s, %(job)s, %(tenant)s, %(kind)s, %(key)s, %(run)s, %(message)s, %(detail)s, %(now)s, 0, 0,
        %(next_delivery)s, %(log)s)
ON CONFLICT (dedup_key) DO NOTHING
"""


def seconds_text(seconds: float, digits: int = 3) -> str:
    """Seconds to `digits` significant digits, never in exponent form: '47.1 s', '0.0004 s'."""
    if seconds == 0:
        return "0 s"
    decimals = min(9, max(0, digits - 1 - math.floor(math.log10(abs(seconds)))))
    text = f"{seconds:.{decimals}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + " s"


def seconds_pair(value: float, limit: float) -> tuple[str, str]:
    """A measured duration and its threshold, with digits enough that they read apart
    ('took 0.0004 s (more than 0.001 s)', never 'took 0.0 s (more than 0.001 s)')."""
    limit_text = seconds_text(limit, 6)
    for digits in range(3, 10):
        value_text = seconds_text(value, digits)
        if value_text != limit_text:
            break
    return value_text, limit_text


def describe_seconds(seconds: float) -> str:
    return describe(timedelta(seconds=seconds))


def describe(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds >= 3600:
        return f"{seconds // 3600} h" + (f" {seconds % 3600 // 60} min" if seconds % 3600 >= 60 else "")
    if seconds >= 60:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds} s"


def recent_alerts(job: Job, *, limit: int = 10) -> list[Alert]:
    return list(Alert.objects.filter(job=job).order_by("-raised_at")[:limit])
