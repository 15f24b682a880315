"""Alerts for time-data changes (services/impact.py finds them): one alert per change of a
job's held fires, whatever the number of beats or checks that find it, since its dedup_key
is the change's fingerprint and the insert does nothing on a key that exists. Sent on the
channels of the job's alert rule (an alert of a job without one is recorded, listed and sent
nowhere); no cool-down (each change is news once), the tenant's hourly budget holds.

Records alerts only; deliver.py sends them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from scheduler_app.alerts.budget import BUDGET_CHANNEL, alert_budget_exceeded, suppressed_entry
from scheduler_app.alerts.evaluate import INSERT_ALERT
from scheduler_app.models import Alert, AlertKind, AlertRule

TIME_DATA = AlertKind.TIME_DATA


@dataclass(frozen=True)
class TimeDataAlert:
    job_id: int
    tenant_id: int
    fingerprint: str  # schedules.Change.fingerprint(job_id)
    message: str
    detail: dict


def dedup_key(job_id: int, fingerprint: str) -> str:
    return f"job{job_id}:{TIME_DATA}:{fingerprint}"


def raise_time_data_alerts(found: Iterable[TimeDataAlert], now: datetime) -> int:
    """Record each change's alert unless it was recorded before; return how many were new."""
    found = list(found)
    known = set(
        Alert.objects.filter(dedup_key__in=[dedup_key(item.job_id, item.fingerprint) for item in found]).values_list(
            "dedup_key", flat=True
        )
    )
    found = [item for item in found if dedup_key(item.job_id, item.fingerprint) not in known]
    rules = dict(AlertRule.objects.filter(job_id__in={item.job_id for item in found}).values_list("job_id", "id"))
    raised = 0
    with connection.cursor() as cursor:
        for item in found:
            over = alert_budget_exceeded(item.tenant_id, now)  # counts the ones just recorded
            cursor.execute(
                INSERT_ALERT,
                {
                    "rule": rules.get(item.job_id),
                    "job": item.job_id,
                    "tenant": item.tenant_id,
                    "kind": TIME_DATA,
                    "key": dedup_key(item.job_id, item.fingerprint)[:200],
                    "run": None,
                    "message": item.message[:1000],
                    "detail": json.dumps(item.detail),
                    "now": now,
                    "next_delivery": None if over else now,
                    "log": json.dumps([suppressed_entry(BUDGET_CHANNEL, now, over)] if over else []),
                },
            )
            raised += cursor.rowcount
    return raised
