"""Where a beat's turn goes: the seconds each step of run_turn took (Laps), summed per turn
into TurnResult.steps, counted on /metrics (cronfleet_beat_step_seconds_total) and told in one
line when the beat stops, so a step that grew (windows, check-ins, calendars, quotas) shows
as its own share of the turn. A lap is one clock read: nothing is sampled or skipped."""

from __future__ import annotations

import time

STEPS_LINE = "beat steps:"  # the stop line's start (bench dispatch reads it)


class Laps:
    """Seconds per named step: each call ends the step under way and names it."""

    __slots__ = ("seconds", "_mark")

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.perf_counter()

    def __call__(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step] = self.seconds.get(step, 0.0) + now - self._mark
        self._mark = now


class StepTotals:
    """The steps' seconds over a beat's life, and its turns."""

    def __init__(self) -> None:
        self.turns = 0
        self.seconds: dict[str, float] = {}

    def add(self, steps: dict[str, float]) -> None:
        self.turns += 1
        for step, seconds in steps.items():
            self.seconds[step] = self.seconds.get(step, 0.0) + seconds

    def line(self) -> str:
        """`beat steps: 12 turns; claim 1.234567 s, insert 0.5 s, ...`, the largest first."""
        ordered = sorted(self.seconds.items(), key=lambda item: -item[1])
        return f"{STEPS_LINE} {self.turns} turns; " + ", ".join(f"{step} {seconds:.6f} s" for step, seconds in ordered)


def parse_line(text: str) -> tuple[int, dict[str, float]] | None:
    """(turns, seconds per step) of a StepTotals.line() found in `text` (the last one), or None."""
    start = text.rfind(STEPS_LINE)
    if start < 0:
        return None
    line = text[start + len(STEPS_LINE) :].splitlines()[0]
    turns, _, rest = line.partition(" turns; ")
    steps: dict[str, float] = {}
    for part in filter(None, rest.split(", ")):
        step, seconds, _unit = part.rsplit(" ", 2)
        steps[step] = float(seconds)
    return int(turns), steps
