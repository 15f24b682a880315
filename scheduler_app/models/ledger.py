"""The ledger's hourly rollup behind wide stats windows (scheduler_app/ledger/rollup.py writes and
reads it). Imports nothing of the project but Django: models.py imports the model from here.
"""

from __future__ import annotations

from django.db import models


class RunHour(models.Model):
    """The runs of one tenant scheduled in one hour (by scheduled_at, as stats.py counts
    them): how many in each state when the hour was rolled up, and histograms of their
    dispatch and start lags (rollup.bucket_of). tenant_id 0 holds every tenant's runs
    together and marks the hour as rolled up, even when nothing was scheduled in it.

    Pruning the ledger leaves these rows alone: the counts outlive the runs."""

    hour = models.DateTimeField()
    tenant_id = models.BigIntegerField()  # not a foreign key: 0 is every tenant, and the marker
    counts = models.JSONField(default=dict)  # {state: runs}, states with none left out
    # Runs per lag bucket, trailing empty buckets left out.
    # JSON lists rather than arrays: the embedded SQLite first run migrates this table too.
    dispatch_lags = models.JSONField(default=list)
    start_lags = models.JSONField(default=list)
    rolled_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant_id", "hour"], name="runhour_unique")]
