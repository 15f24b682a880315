"""A turn's steps timed (dispatch/laps.py): laps add up per step, a beat's totals make one
line that bench dispatch reads back, and the seconds reach /metrics."""

from __future__ import annotations

import pytest

from scheduler_app import dispatch
from scheduler_app.dispatch import laps
from scheduler_app.observability import metrics
from tests.unit.observability.test_metrics import sample


def test_each_lap_charges_the_time_since_the_last_one_to_its_step(monkeypatch):
    clock = iter([10.0, 10.5, 12.0, 12.25])
    monkeypatch.setattr(laps.time, "perf_counter", lambda: next(clock))
    lap = laps.Laps()  # reads 10.0

    lap("claim")
    lap("insert")
    lap("claim")  # a step met twice in a turn adds up

    assert lap.seconds == {"claim": 0.75, "insert": 1.5}


def test_a_beats_totals_make_one_line_that_reads_back():
    totals = laps.StepTotals()
    totals.add({"claim": 0.25, "insert": 1.0})
    totals.add({"claim": 0.5, "windows": 0.000001})

    line = totals.line()

    assert line == "beat steps: 2 turns; insert 1.000000 s, claim 0.750000 s, windows 0.000001 s"
    log = f"INFO beat turn: claimed 3 jobs\nINFO {line}\nINFO stopped\n"
    assert laps.parse_line(log) == (2, {"insert": 1.0, "claim": 0.75, "windows": 0.000001})
    assert laps.parse_line("no such line") is None


def test_a_turns_steps_reach_metrics():
    before = sample("cronfleet_beat_step_seconds_total", step="calendars")

    metrics.observe_turn(dispatch.TurnResult(steps={"calendars": 0.125, "claim": 0.5}), 0.7)

    assert sample("cronfleet_beat_step_seconds_total", step="calendars") == pytest.approx(before + 0.125)
