"""The dashboard's SVG charts: time axes that end where they are told (now), labelled at
evenly spaced round times, bars cut at the axis' end."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from scheduler_app.admin import charts

NOW = datetime(2024, 3, 5, 14, 37, 20, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def test_an_hour_is_labelled_every_ten_minutes_and_a_day_every_three_hours():
    hour = charts.time_ticks(NOW - timedelta(hours=1), NOW)
    day = charts.time_ticks(NOW - timedelta(days=1), NOW)

    assert [at.strftime("%H:%M") for at in hour] == ["13:40", "13:50", "14:00", "14:10", "14:20", "14:30"]
    assert [at.strftime("%H:%M") for at in day][:3] == ["15:00", "18:00", "21:00"] and len(day) == 8
    assert all(b - a == timedelta(hours=3) for a, b in zip(day, day[1:], strict=False))


def test_an_axis_ending_at_now_cuts_the_current_minute_s_bar_there():
    start = NOW.replace(second=0) + MINUTE - timedelta(hours=1)
    minutes = [start + MINUTE * i for i in range(60)]
    values = [1] * 60

    svg = str(
        charts.stacked_bars("Runs", minutes, [charts.Series("succeeded", values)], step=MINUTE, axis=(start, NOW))
    )

    right_edge = charts.WIDTH - charts.PAD_RIGHT
    bars = [
        (float(x), float(w))
        for x, w in re.findall(r'<rect class="cf-point[^>]* x="([\d.]+)"[^>]* width="([\d.]+)"', svg)
    ]
    assert len(bars) == 60 and max(x + w for x, w in bars) <= right_edge
    full, last = bars[0][1], bars[-1][1]
    assert last < full / 2  # 20 s of the current minute, of 60
    labels = re.findall(r'<text class="cf-axis"[^>]*>([^<]+)</text>', svg)
    assert "14:30" in labels and "14:40" not in labels  # nothing labelled after now
