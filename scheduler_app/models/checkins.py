"""Check-ins: a monitored job (target kind `monitor`) runs elsewhere and reports to Cronfleet
by pinging /ping/<ping_key> (/ping/<cell>/<ping_key> in a named cell). The key is the only credential a ping carries: random (uuid4),
unique, one per monitored job. The job's grace is in its target_config (grace_seconds)."""

from __future__ import annotations

import uuid

from django.db import models

from scheduler_app.models.core import Job
from scheduler_app.models.tenants import Tenant

# Reasons of a monitored job's open runs start with this: the beat records a fire as
# `pending` "checkin: waiting for a ping" (never published) and /start moves it to
# `running` "checkin: started". The partial index jobrun_checkin_open_idx (migration 0025)
# holds exactly these runs, so the beat's sweep for missed check-ins reads only them.
CHECKIN_PREFIX = "checkin:"
WAITING_REASON = "checkin: waiting for a ping"
STARTED_REASON = "checkin: started"
# A monitored job's grace when its target_config names none (the services always store one).
DEFAULT_GRACE_SECONDS = 300


class Monitor(models.Model):
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="monitor")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    ping_key = models.UUIDField(unique=True, default=uuid.uuid4, editable=False)
    # The cell named in the ping URL (/ping/<cell>/<key>; empty: /ping/<key>), kept when the
    # tenant moves, like ApiKey.cell.
    cell = models.CharField(max_length=16, blank=True, default="", db_default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"monitor of job {self.job_id}"
