"""Admin: the beats and workers (nodes.py), read-only, with whether each is live now.

Live, stale and stopped are judged by the database's clock against each node's own bound
(stale_after_seconds); the list is a few dozen rows (nodes are pruned after a day).
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now
from django.utils.html import format_html

from scheduler_app.models import Node
from scheduler_app.observability.nodes import NodeState


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("kind", "name", "state", "seen", "activity", "queue_list", "host", "pid", "version", "started_at")
    list_filter = ("kind",)
    ordering = ("kind", "stopped_at", "name", "-started_at")
    readonly_fields = [field.name for field in Node._meta.fields]

    def get_queryset(self, request):
        # The age by the database's clock, in the list's own query.
        age = ExpressionWrapper(Now() - F("last_seen_at"), output_field=DurationField())
        return super().get_queryset(request).annotate(age=age)

    def judged(self, node: Node) -> NodeState:
        return NodeState(node, max(0.0, node.age.total_seconds()))

    @admin.display(description="state")
    def state(self, node: Node) -> str:
        state = self.judged(node).state
        colour = {"live": "green", "stale": "#b00", "stopped": "gray"}[state]
        return format_html('<b style="color: {}">{}</b>', colour, state)

    @admin.display(description="last seen", ordering="last_seen_at")
    def seen(self, node: Node) -> str:
        return f"{self.judged(node).age:.0f} s ago (stale after {node.stale_after_seconds:.0f} s)"

    @admin.display(description="queues")
    def queue_list(self, node: Node) -> str:
        return ", ".join(node.queues) or "-"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False
