"""The dashboard page's header totals beside the sums of its panels, read from its HTML: what
tests/integration/observability/test_dashboard_totals.py (PostgreSQL) and
tests/system/observability/test_dashboard_sqlite.py (the embedded SQLite demo) compare."""

from __future__ import annotations

import re

FINISHED = {"succeeded", "failed", "dead"}
FAILURES = {"failed", "dead"}


def _text(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</', html, re.S)
    assert found, f"no #{element_id}"
    return found.group(1).strip()


def _section(html: str, element_id: str) -> str:
    found = re.search(rf'<section class="cf-panel[^"]*" id="{element_id}">(.*?)</section>', html, re.S)
    assert found, f"no panel #{element_id}"
    return found.group(1)


def _bars(html: str, panel: str) -> dict[str, float]:
    """A bar chart's values summed by series."""
    sums: dict[str, float] = {}
    for series, value in re.findall(
        r'<rect class="cf-point[^"]*" data-series="(\w+)"[^>]* data-value="([\d.]+)"', _section(html, panel)
    ):
        sums[series] = sums.get(series, 0) + float(value)
    return sums


def _rows(html: str, panel: str) -> list[list[str]]:
    body = re.search(r"<tbody>(.*?)</tbody>", _section(html, panel), re.S)
    if body is None:
        return []
    return [re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)]


def totals_and_sums(html: str) -> dict[str, tuple]:
    """For each figure, (what the header says, what the panels add up to); and the series the
    "runs finished" charts draw."""
    hour, day = _bars(html, "cf-runs-hour"), _bars(html, "cf-runs-day")
    tenants = [(int(row[1]), int(row[2])) for row in _rows(html, "cf-tenants")]
    failing = [int(row[1]) for row in _rows(html, "cf-failing")]
    hour_runs, day_runs = int(_text(html, "cf-hour-runs")), int(_text(html, "cf-day-runs"))
    hour_failures, day_failures = int(_text(html, "cf-hour-failures")), int(_text(html, "cf-day-failures"))
    return {
        "hour runs / hour chart": (hour_runs, round(sum(hour.values()))),
        "hour failures / hour chart": (hour_failures, round(sum(v for s, v in hour.items() if s in FAILURES))),
        "day runs / day chart": (day_runs, round(sum(day.values()))),
        "day failures / day chart": (day_failures, round(sum(v for s, v in day.items() if s in FAILURES))),
        "day runs / noisiest tenants": (day_runs, sum(runs for runs, _ in tenants)),
        "day failures / noisiest tenants": (day_failures, sum(failures for _, failures in tenants)),
        "day failures / top failing jobs": (day_failures, sum(failing)),
        "charted series are finished ones": (True, set(hour) | set(day) <= FINISHED),
    }


def disagreements(html: str) -> dict[str, tuple]:
    """The figures whose header and panels differ (none, on a dashboard that adds up)."""
    return {name: pair for name, pair in totals_and_sums(html).items() if pair[0] != pair[1]}
