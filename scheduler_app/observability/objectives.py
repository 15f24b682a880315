"""The fleet objectives on the web's /metrics (docs/objectives.md), for the burn-rate rules of
deploy/prometheus/objectives.yml:

- cronfleet_objective_events_total and cronfleet_objective_good_events_total: counters of
  each objective's events and good events, as the beats counted them (ledger/objectives.py);
  Prometheus takes their rate over any window it likes;
- cronfleet_objective_target (a fraction), cronfleet_objective_window_seconds;
- cronfleet_objective_attainment (good / total over the window; absent with no event) and
  cronfleet_objective_error_budget_remaining (1: untouched, 0: spent, below 0: overspent);
- cronfleet_objective_counted_seconds: how far behind now the counting is (beats count every
  CRONFLEET_ALERT_CHECK_SECONDS, COUNT_AFTER behind; a growing figure: no beat counts).

Labels: objective (TENANT/NAME, or NAME for a fleet-wide one), tenant, tag, kind; as many
series as objectives declared. Read at a scrape from the objectives' rows and their hours
(ledger/objectives.window_of), never the ledger; reused for CACHE_SECONDS per process.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from scheduler_app.ledger.objectives import Window, window_of
from scheduler_app.models import Objective, db_now

logger = logging.getLogger(__name__)

CACHE_SECONDS = 5.0  # the tallies move once per CRONFLEET_ALERT_CHECK_SECONDS at most
LABELS = ["objective", "tenant", "tag", "kind"]

_cached: tuple[float, list] | None = None


def read() -> list[tuple[Objective, Window, float]]:
    """Every objective, its window, and the seconds its counting is behind now."""
    now = db_now()
    objectives = list(Objective.objects.select_related("tenant").order_by("id"))
    windows = window_of(objectives, now)
    return [
        (objective, windows[objective.id], (now - objective.counted_until).total_seconds()) for objective in objectives
    ]


def cached() -> list[tuple[Objective, Window, float]]:
    global _cached
    if _cached is not None and time.monotonic() - _cached[0] < CACHE_SECONDS:
        return _cached[1]
    found = read()
    _cached = (time.monotonic(), found)
    return found


def labels_of(objective: Objective) -> list[str]:
    return [str(objective), objective.tenant.slug if objective.tenant_id else "", objective.tag, objective.kind]


class ObjectiveCollector:
    def collect(self):
        try:
            found = cached()
        except DatabaseError as exc:
            logger.warning("metrics: the objectives were not read: %s", exc)
            return
        events = CounterMetricFamily(
            "cronfleet_objective_events", "Events of each fleet objective counted so far", labels=LABELS
        )
        good = CounterMetricFamily(
            "cronfleet_objective_good_events", "Good events of each fleet objective counted so far", labels=LABELS
        )
        target = GaugeMetricFamily("cronfleet_objective_target", "The fraction of good events promised", labels=LABELS)
        window = GaugeMetricFamily(
            "cronfleet_objective_window_seconds", "The window the objective's target holds over", labels=LABELS
        )
        attained = GaugeMetricFamily(
            "cronfleet_objective_attainment", "Good events / events over the objective's window", labels=LABELS
        )
        budget = GaugeMetricFamily(
            "cronfleet_objective_error_budget_remaining",
            "The fraction of the error budget left over the window (below 0: overspent)",
            labels=LABELS,
        )
        behind = GaugeMetricFamily(
            "cronfleet_objective_counted_seconds", "Seconds between now and the last event counted", labels=LABELS
        )
        for objective, counted, lag in found:
            labels = labels_of(objective)
            events.add_metric(labels, objective.total_events)
            good.add_metric(labels, objective.good_events)
            target.add_metric(labels, objective.target)
            window.add_metric(labels, objective.window_days * 86400)
            if counted.attainment is not None:
                attained.add_metric(labels, counted.attainment)
            budget.add_metric(labels, counted.budget_left)
            behind.add_metric(labels, lag)
        yield from (events, good, target, window, attained, budget, behind)
