"""Pauses that ran out (docs/pauses.md), once with any number of beats.

A pause may say until when and what then: `resume` (the job starts again from now, audited
as resumed by "beat:pause-expired") or `alert` (one pause_expired alert: "paused, not
healthy", on the job's alert rule if it has one, else recorded and listed, sent nowhere).

Each beat runs expire_pauses() on its alerts turn (alerts.on_beat_turn). The jobs whose
pause ran out are claimed with FOR UPDATE SKIP LOCKED, and the claim's WHERE is judged again
on a row another beat changed meanwhile (PostgreSQL re-reads a locked row's newest version):
a job resumed, or stamped pause_alerted_at, by one beat is not claimed by the next. The
alert's dedup_key (the job, the pause's start and its end) is the safety net under that; a
pause given a new end alerts again when that one passes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from scheduler_app import schedules
from scheduler_app.alerts.budget import BUDGET_CHANNEL, alert_budget_exceeded, suppressed_entry
from scheduler_app.alerts.evaluate import INSERT_ALERT, compose, describe
from scheduler_app.models import AlertKind, AlertRule, Job
from scheduler_app.models.lifecycle import audit_job, job_resume

logger = logging.getLogger(__name__)

EXPIRED_PER_TURN = 200  # pauses one beat handles per turn (the rest wait for the next)
ACTOR = "beat:pause-expired"


@dataclass
class Expired:
    resumed: int = 0
    alerted: int = 0


def claim_expired(now: datetime, *, limit: int) -> list[Job]:
    """Lock the paused jobs whose pause ran out and is not answered yet; jobs another beat
    holds are skipped. Call inside a transaction."""
    jobs = Job.objects.filter(enabled=False, paused_until__lte=now, pause_alerted_at__isnull=True)
    if connection.features.has_select_for_update_skip_locked:
        jobs = jobs.select_for_update(skip_locked=True, of=("self",))
    return list(jobs.select_related("tenant").order_by("paused_until", "id")[:limit])


def expire_pauses(now: datetime, *, limit: int = EXPIRED_PER_TURN) -> Expired:
    """Resume or alert each job whose pause ran out by `now`; one transaction."""
    done = Expired()
    with transaction.atomic():
        for job in claim_expired(now, limit=limit):
            what = schedules.expiry_due(
                enabled=job.enabled,
                until=job.paused_until,
                expiry=job.pause_expiry,
                alerted_at=job.pause_alerted_at,
                now=now,
            )
            if what == "resume":
                job_resume(job, actor=ACTOR, reason=f"the pause by {job.paused_by or '?'} ran out", **pause_of(job))
                done.resumed += 1
            elif what == "alert":
                done.alerted += alert_expired(job, now)
    if done.resumed or done.alerted:
        logger.info("pauses ran out: %s jobs resumed, %s alerts raised", done.resumed, done.alerted)
    return done


def pause_of(job: Job) -> dict:
    """What the pause said, for its audit row and its alert."""
    return {
        "paused_by": job.paused_by,
        "paused_at": job.paused_at.isoformat() if job.paused_at else None,
        "paused_until": job.paused_until.isoformat() if job.paused_until else None,
        "note": job.paused_note,
    }


def alert_expired(job: Job, now: datetime) -> int:
    """Record the job's pause_expired alert (1), or nothing when it exists (0); stamp the
    job so that no beat claims its pause again. Under the job's row lock."""
    rule_id = AlertRule.objects.filter(job_id=job.id, enabled=True).values_list("id", flat=True).first()
    start = job.paused_at or job.paused_until
    assert job.paused_until is not None and start is not None  # claimed: paused_until <= now
    reason = (
        f"paused, not healthy: paused {describe(now - start)} ago by {job.paused_by or '?'} "
        f"({job.paused_note or 'no reason given'}) until {job.paused_until:%Y-%m-%d %H:%M:%S}Z, "
        "which has passed; resume it or pause it again with a new end"
    )
    over = alert_budget_exceeded(job.tenant_id, now)
    with connection.cursor() as cursor:  # the unique key decides; a second beat's insert does nothing
        cursor.execute(
            INSERT_ALERT,
            {
                "rule": rule_id,
                "job": job.id,
                "tenant": job.tenant_id,
                "kind": AlertKind.PAUSE_EXPIRED.value,
                "key": f"job{job.id}:{AlertKind.PAUSE_EXPIRED.value}:at:{start.isoformat()}:until:"
                f"{job.paused_until.isoformat()}"[:200],
                "run": None,
                "message": compose(reason, f"job {job}")[:1000],
                "detail": json.dumps(pause_of(job)),
                "now": now,
                "next_delivery": None if over else now,
                "log": json.dumps([suppressed_entry(BUDGET_CHANNEL, now, over)] if over else []),
            },
        )
        raised = cursor.rowcount
    Job.objects.filter(id=job.id).update(pause_alerted_at=now)
    if raised:
        audit_job(job, "job.pause_expired", ACTOR, **pause_of(job))
    return raised
