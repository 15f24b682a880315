"""Beats and workers as rows: what each node last said it was (observability/nodes.py
registers and heartbeats them)."""

from __future__ import annotations

from django.db import models

from scheduler_app.models.choices import TextChoices


class NodeKind(TextChoices):
    BEAT = "beat"
    WORKER = "worker"


class Node(models.Model):
    """A beat or worker process, as it last said it was."""

    kind = models.CharField(max_length=16, choices=NodeKind.choices)
    name = models.CharField(max_length=255)  # beat@host:pid, or the worker's Celery node name
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    version = models.CharField(max_length=64, blank=True)
    # A worker's queues (it consumes them); a beat's (it has claimed jobs for them).
    queues = models.JSONField(default=list, blank=True)
    activity = models.CharField(max_length=500, blank=True, help_text="What it was doing when last seen")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stale_after_seconds = models.FloatField(help_text="Stale when not seen for this long")
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "scheduler_app"
        ordering = ["kind", "name", "-started_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
