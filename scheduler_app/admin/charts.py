"""Server-rendered SVG charts for the console: no JavaScript, no library, nothing fetched.

Pure: data in, markup out (django.utils.html escapes every label). Each data point is an
element with class "cf-point" and data-* attributes naming its series and value, so a test
(or a person's devtools) can count what a chart shows. Colours come from the CSS classes in
scheduler_app/static/scheduler_app/console.css.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 560, 150
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 40, 8, 8, 20


@dataclass(frozen=True)
class Series:
    name: str  # also its CSS class: cf-series-<name>
    values: Sequence[float | None]  # one per bucket; None: no data


def _scale(maximum: float) -> float:
    """A round top for the y axis (1, 2, 5 x 10^n) at or above `maximum`."""
    if maximum <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(maximum))) / 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= maximum:
            return step * magnitude
    return maximum


TICK_STEPS = tuple(timedelta(minutes=m) for m in (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440))
MAX_TICKS = 8


def time_ticks(start: datetime, end: datetime) -> list[datetime]:
    """Round instants to label an axis with, evenly spaced (every 10 minutes over an hour, every
    3 hours over a day): the first step that needs at most MAX_TICKS."""
    span = end - start
    step = next((step for step in TICK_STEPS if span / step <= MAX_TICKS), TICK_STEPS[-1])
    seconds = step.total_seconds()
    first = datetime.fromtimestamp(-(-start.timestamp() // seconds) * seconds, tz=start.tzinfo)
    return [first + step * i for i in range(int((end - first) / step) + 1)]


def _tick_labels(start: datetime, end: datetime, top_y: float, bottom_y: float) -> str:
    span = (end - start).total_seconds() or 1.0
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    parts = []
    for at in time_ticks(start, end):
        x = PAD_LEFT + inner_w * (at - start).total_seconds() / span
        # A label at an end of the axis stays inside the chart.
        anchor = "start" if x - PAD_LEFT < 16 else "end" if WIDTH - PAD_RIGHT - x < 16 else "middle"
        label = at.strftime("%a %H:%M" if at.hour == at.minute == 0 and span >= 23 * 3600 else "%H:%M")
        parts.append(
            f'<line class="cf-grid cf-tick" x1="{x:.1f}" x2="{x:.1f}" y1="{top_y:.1f}" y2="{bottom_y + 3:.1f}"/>'
            f'<text class="cf-axis" x="{x:.1f}" y="{HEIGHT - 5}" text-anchor="{anchor}">{escape(label)}</text>'
        )
    return "".join(parts)


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"


def _frame(
    title: str, top: float, start: datetime, end: datetime, unit: str, body: str, legend: Sequence[str]
) -> SafeString:
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    grid = "".join(
        f'<line class="cf-grid" x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{PAD_TOP + inner_h * (1 - f):.1f}" '
        f'y2="{PAD_TOP + inner_h * (1 - f):.1f}"/>'
        f'<text class="cf-axis" x="{PAD_LEFT - 4}" y="{PAD_TOP + inner_h * (1 - f) + 3:.1f}" text-anchor="end">'
        f"{_number(top * f)}</text>"
        for f in (0, 0.5, 1)
    )
    x_labels = _tick_labels(start, end, PAD_TOP, PAD_TOP + inner_h)
    unit = f"{unit}, {end.strftime('%Z')}" if unit else end.strftime("%Z")
    keys = "".join(f'<span class="cf-key cf-series-{escape(name)}">{escape(name)}</span>' for name in legend)
    if not body:  # empty axes alone read as "broken" or "still loading"
        body = _no_data(PAD_TOP + inner_h / 2)
    return format_html(
        '<figure class="cf-chart"><figcaption>{} <small>{}</small> {}</figcaption>'
        '<svg viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">{}{}{}</svg></figure>',
        title,
        unit,
        mark_safe(keys),
        WIDTH,
        HEIGHT,
        WIDTH,
        HEIGHT,
        title,
        mark_safe(grid),
        mark_safe(body),
        mark_safe(x_labels),
    )


Axis = tuple[datetime, datetime]


def _span(buckets: Sequence[datetime], step: timedelta, axis: Axis | None) -> Axis:
    """The time axis: `axis`, or from the first bucket to the end of the last."""
    if axis is not None:
        return axis
    end = buckets[-1] + step if buckets else datetime.fromtimestamp(step.total_seconds(), UTC)
    return (buckets[0] if buckets else end, end)


def _place(at: datetime, step: timedelta, axis: Axis) -> tuple[float, float]:
    """The x range of the bucket [at, at + step) on the axis, cut at its ends (a partial
    first or last bucket is drawn as wide as the part of it the axis holds)."""
    start, end = axis
    span = (end - start).total_seconds() or 1.0
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT

    def x(moment: datetime) -> float:
        return PAD_LEFT + inner_w * min(max((moment - start).total_seconds() / span, 0), 1)

    return x(at), x(at + step)


def stacked_bars(
    title: str,
    buckets: Sequence[datetime],
    series: Sequence[Series],
    *,
    step: timedelta,
    unit: str = "",
    axis: Axis | None = None,
) -> SafeString:
    """One bar per bucket, its series stacked (counts per minute by outcome, say), on a time
    axis from the first bucket to the end of the last, or `axis` (ending at now, say)."""
    totals = [sum(s.values[i] or 0 for s in series) for i in range(len(buckets))]
    top = _scale(max(totals, default=0))
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    start, end = _span(buckets, step, axis)
    parts = []
    for i, at in enumerate(buckets):
        left, right = _place(at, step, (start, end))
        base = 0.0
        for s in series:
            value = s.values[i] or 0
            if not value or right <= left:
                continue
            h = inner_h * value / top
            y = PAD_TOP + inner_h * (1 - (base + value) / top)
            parts.append(
                f'<rect class="cf-point cf-series-{escape(s.name)}" data-series="{escape(s.name)}" '
                f'data-at="{at.isoformat()}" data-value="{value:g}" x="{left:.2f}" y="{y:.2f}" '
                f'width="{max(right - left - 0.5, 0.5):.2f}" height="{h:.2f}"><title>{escape(at.strftime("%H:%M"))} '
                f"{escape(s.name)}: {value:g}</title></rect>"
            )
            base += value
    return _frame(title, top, start, end, unit, "".join(parts), [s.name for s in series])


def lines(
    title: str,
    buckets: Sequence[datetime],
    series: Sequence[Series],
    *,
    step: timedelta,
    unit: str = "",
    axis: Axis | None = None,
) -> SafeString:
    """One polyline per series, a dot per bucket that has a value (lag percentiles, say), in
    the middle of the part of its bucket the axis holds."""
    values = [v for s in series for v in s.values if v is not None]
    top = _scale(max(values, default=0))
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    start, end = _span(buckets, step, axis)
    parts = []
    for s in series:
        points = []
        for i, at in enumerate(buckets):
            value = s.values[i]
            left, right = _place(at, step, (start, end))
            if value is None or right <= left:
                continue
            x, y = (left + right) / 2, PAD_TOP + inner_h * (1 - min(value, top) / top)
            points.append((x, y))
            parts.append(
                f'<circle class="cf-point cf-series-{escape(s.name)}" data-series="{escape(s.name)}" '
                f'data-at="{at.isoformat()}" data-value="{value:g}" cx="{x:.2f}" cy="{y:.2f}" r="1.8">'
                f"<title>{escape(at.strftime('%H:%M'))} {escape(s.name)}: {value:.3g}</title></circle>"
            )
        if len(points) > 1:
            path = " ".join(f"{x:.2f},{y:.2f}" for x, y in points)
            parts.insert(0, f'<polyline class="cf-line cf-series-{escape(s.name)}" points="{path}"/>')
    return _frame(title, top, start, end, unit, "".join(parts), [s.name for s in series])


@dataclass(frozen=True)
class Mark:
    at: datetime
    state: str
    label: str  # the tooltip
    href: str = ""


def timeline(title: str, start: datetime, end: datetime, marks: Sequence[Mark]) -> SafeString:
    """Fires on a time axis from `start` to `end`, one tick per fire, coloured by state."""
    span = (end - start).total_seconds() or 1.0
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    height = 46
    parts = []
    for mark in marks:
        x = PAD_LEFT + inner_w * min(max((mark.at - start).total_seconds() / span, 0), 1)
        tick = (
            f'<rect class="cf-point cf-state-fill cf-{escape(mark.state)}" data-series="{escape(mark.state)}" '
            f'data-at="{mark.at.isoformat()}" x="{x - 1:.2f}" y="8" width="2.5" height="22">'
            f"<title>{escape(mark.label)}</title></rect>"
        )
        parts.append(f'<a href="{escape(mark.href)}">{tick}</a>' if mark.href else tick)
    hours = []
    for n in range(0, 25, 6):
        x = PAD_LEFT + inner_w * n / 24
        at = start + (end - start) * n / 24
        # The last label ends at the axis' end (centred there, half of it fell outside the chart).
        clock = "%a %H:%M" if n in (0, 24) else "%H:%M"  # the ends say which day (the same clock time)
        anchor, label = ("end", at.strftime(clock + " %Z")) if n == 24 else ("middle", at.strftime(clock))
        hours.append(
            f'<line class="cf-grid" x1="{x:.1f}" x2="{x:.1f}" y1="6" y2="32"/>'
            f'<text class="cf-axis" x="{x:.1f}" y="43" text-anchor="{anchor}">{escape(label)}</text>'
        )
    return format_html(
        '<figure class="cf-chart cf-timeline"><figcaption>{}</figcaption>'
        '<svg viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">{}{}</svg></figure>',
        title,
        WIDTH,
        height,
        WIDTH,
        height,
        title,
        mark_safe("".join(hours)),
        mark_safe("".join(parts) or _no_data(22)),
    )


NO_DATA = "no data"


def _no_data(y: float) -> str:
    x = PAD_LEFT + (WIDTH - PAD_LEFT - PAD_RIGHT) / 2
    return f'<text class="cf-nodata" x="{x:.1f}" y="{y:.1f}" text-anchor="middle">{NO_DATA}</text>'
