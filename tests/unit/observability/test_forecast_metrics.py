"""The autoscaling forecast (observability/forecast.py, docs/autoscaling.md) without a database:
the most work in one window, the plain script (deploy/autoscale.py) importing neither Django
nor Cronfleet, and the KEDA example querying a series that exists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import yaml

from scheduler_app.observability import cluster, forecast
from tests.conftest import ROOT

# A Monday evening; the Tuesday after is a holiday of the tenant's calendar.
NOW = datetime(2031, 3, 3, 23, 50, 30, tzinfo=UTC)
SCRIPT = ROOT / "deploy" / "autoscale.py"


def test_the_most_work_in_one_window_slides_over_the_fire_times():
    at = [NOW + timedelta(seconds=s) for s in (0, 10, 29, 30, 61)]
    events = list(zip(at, [1.0, 2.0, 4.0, 8.0, 3.0], strict=True))

    assert forecast.most_in_one_window(events, 30) == 2.0 + 4.0 + 8.0  # 10 s to 30 s; 0 s is 30 s before 30 s
    assert forecast.most_in_one_window(events[:4], 31) == 15.0
    assert forecast.most_in_one_window([], 30) == 0.0


def test_the_script_imports_neither_django_nor_cronfleet():
    source = SCRIPT.read_text()
    assert "django" not in source.lower().replace("no django", "") and "scheduler_app" not in source


# --- the KEDA example ---------------------------------------------------------------------------


def test_the_keda_example_queries_a_series_the_web_exposes():
    found = yaml.safe_load((ROOT / "deploy" / "keda" / "scaledobject.yaml").read_text())

    assert (found["apiVersion"], found["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    (trigger,) = found["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert {"serverAddress", "query", "threshold"} <= set(trigger["metadata"])
    assert "cronfleet_forecast_workers{" in trigger["metadata"]["query"]
    assert "cronfleet_forecast_workers" in cluster.NAMES
