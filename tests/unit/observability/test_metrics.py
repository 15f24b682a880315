"""Metrics (metrics.py) without a database or a broker: a fire's labels, the fires a turn
recorded, what observe_turn counts, and a forked exporter refused without a multiprocess
directory (the rest: tests/integration/observability/test_metrics.py and
tests/system/observability/test_metrics.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from scheduler_app import dispatch
from scheduler_app.observability import metrics
from tests.conftest import NOW


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# --- pure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason", "labels"),
    [
        ("queued", "", ("queued", "")),
        ("skipped", "coalesced", ("skipped", "coalesced")),
        ("skipped", "overlap_skip: run 7 still running", ("skipped", "overlap_skip")),
        (
            "skipped",
            "outside_catchup_window: missed fires up to 2024-01-01T00:00:00+00:00",
            ("skipped", "outside_catchup_window"),
        ),
        (
            "pending",
            "quota_concurrency: waiting for room under the tenant's limit of 2 concurrent runs",
            ("held", "quota"),
        ),
        ("pending", "overlap_buffered: waiting for run 7 still running", ("held", "overlap")),
        ("skipped", "paused: missed fires from 2024-01-01T00:00:00+00:00", ("skipped", "paused")),
        ("skipped", "Something Else With 123 Digits", ("skipped", "other")),
    ],
)
def test_a_fires_labels_are_its_state_and_the_class_of_its_reason(state, reason, labels):
    assert metrics.fire_outcome(state, reason) == labels


def test_recorded_fires_leave_out_fires_that_already_had_a_run():
    rows = [
        dispatch.plan.RunRow(1, 1, NOW - timedelta(seconds=3), "queued", "", 1, 5),
        dispatch.plan.RunRow(2, 1, NOW - timedelta(seconds=9), "skipped", "coalesced", 1, 5),
        dispatch.plan.RunRow(2, 1, NOW - timedelta(seconds=1), "queued", "", 1, 5),
    ]
    inserted = [(10, 1, "queued"), (11, 2, "skipped")]  # job 2's queued fire had a run already

    found = metrics.recorded_fires(rows, inserted, {1: {"queue": ""}, 2: {"queue": "q2"}}, NOW)

    assert found == [("cronfleet", "queued", "", 3.0), ("q2", "skipped", "coalesced", None)]


def test_observe_turn_counts_fires_lags_and_the_turns_other_figures(queue_name):
    before = {
        name: sample(name)
        for name in (
            "cronfleet_beat_turns_total",
            "cronfleet_runs_lost_total",
            "cronfleet_runs_republished_total",
            "cronfleet_runs_published_total",
        )
    }
    turn = dispatch.TurnResult(
        published=3,
        lost=2,
        republished=1,
        held_back=[queue_name],
        recorded=[
            (queue_name, "queued", "", 0.2),
            (queue_name, "queued", "", 7.0),
            (queue_name, "skipped", "coalesced", None),
            (queue_name, "pending", "quota_fires_per_minute: ...", None),
        ],
    )

    metrics.observe_turn(turn, 0.04)

    assert sample("cronfleet_beat_turns_total") == before["cronfleet_beat_turns_total"] + 1
    assert sample("cronfleet_runs_lost_total") == before["cronfleet_runs_lost_total"] + 2
    assert sample("cronfleet_runs_republished_total") == before["cronfleet_runs_republished_total"] + 1
    assert sample("cronfleet_runs_published_total") == before["cronfleet_runs_published_total"] + 3
    assert sample("cronfleet_fires_total", queue=queue_name, outcome="queued", reason="") == 2
    assert sample("cronfleet_fires_total", queue=queue_name, outcome="skipped", reason="coalesced") == 1
    assert sample("cronfleet_fires_total", queue=queue_name, outcome="held", reason="quota") == 1
    assert sample("cronfleet_dispatch_lag_seconds_count", queue=queue_name) == 2
    assert sample("cronfleet_dispatch_lag_seconds_bucket", queue=queue_name, le="0.25") == 1
    assert sample("cronfleet_dispatch_lag_seconds_sum", queue=queue_name) == pytest.approx(7.2)
    assert sample("cronfleet_backpressure_holds_total", queue=queue_name) == 1


def test_a_forked_exporter_without_a_multiprocess_directory_is_refused(monkeypatch):
    monkeypatch.setattr(metrics, "MULTIPROC_DIR", "")

    with pytest.raises(metrics.MissingMultiprocDir, match="PROMETHEUS_MULTIPROC_DIR"):
        metrics.process_registry(forked=True)
    assert metrics.process_registry(forked=False) is REGISTRY


def test_observe_many_writes_what_observing_each_amount_writes():
    from prometheus_client import CollectorRegistry, Histogram

    registry = CollectorRegistry()
    buckets = (0.1, 0.5, 1.0, 5.0)
    each = Histogram("each_seconds", "one observe a sample", ["queue"], buckets=buckets, registry=registry)
    many = Histogram("many_seconds", "observe_many", ["queue"], buckets=buckets, registry=registry)
    amounts = [-1.0, 0.0, 0.1, 0.10001, 0.5, 0.7, 1.0, 4.99, 5.0, 5.01, 1e9, 0.3, 0.3]
    for amount in amounts:
        each.labels("q").observe(amount)
    metrics.observe_many(many.labels("q"), amounts)

    def samples(name: str) -> dict:
        return {
            (sample.name.removeprefix(name), tuple(sorted(sample.labels.items()))): sample.value
            for metric in registry.collect()
            if metric.name == name
            for sample in metric.samples
            if not sample.name.endswith("_created")
        }

    each, many = samples("each_seconds"), samples("many_seconds")
    sum_key = ("_sum", (("queue", "q"),))
    # The sum is added up in another order (Python 3.12's sum() compensates): equal to rounding.
    assert many.pop(sum_key) == pytest.approx(each.pop(sum_key), rel=1e-12)
    assert each == many  # every bucket and the count exactly
    assert many[("_bucket", (("le", "+Inf"), ("queue", "q")))] == len(amounts)
