"""A bulk pause waiting for a second person (docs/pauses.md): a pause of more jobs than
CRONFLEET_BULK_PAUSE_APPROVAL_OVER is recorded here with the fingerprint of the exact set of
jobs it would pause, and happens only when another person approves that fingerprint while
the set is still the same (services/pauses.py)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from scheduler_app.models.choices import TextChoices


class PauseRequestState(TextChoices):
    PENDING = "pending"  # waiting for a second person
    APPROVED = "approved"  # approved and done: the jobs were paused
    REFUSED = "refused"  # withdrawn or refused by a person


class PauseRequest(models.Model):
    # NULL: a staff selection across tenants (the admin's action).
    tenant = models.ForeignKey(
        "scheduler_app.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="pause_requests"
    )
    scope = models.CharField(max_length=100)  # "tag:<tag>", "tenant" or "selection"
    job_ids = models.JSONField(default=list)  # the exact set, sorted
    fingerprint = models.CharField(max_length=16)
    note = models.CharField(max_length=500, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True)
    pause_expiry = models.CharField(max_length=8, blank=True, default="")
    requested_by = models.CharField(max_length=200)
    requested_at = models.DateTimeField()
    state = models.CharField(max_length=8, choices=PauseRequestState.choices, default=PauseRequestState.PENDING)
    decided_by = models.CharField(max_length=200, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [
            # The pending requests (the dashboard, `jobs pause-requests`), newest first.
            models.Index(fields=["-requested_at"], name="pauserequest_pending_idx", condition=Q(state="pending")),
        ]
        # The second person of a bulk pause over CRONFLEET_BULK_PAUSE_APPROVAL_OVER (docs/roles.md).
        permissions = [("approve_pauserequest", "Can approve another person's bulk pause")]

    def __str__(self) -> str:
        return f"pause of {len(self.job_ids)} jobs ({self.scope}) by {self.requested_by}"
