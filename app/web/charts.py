"""Small charts drawn as SVG by the templates: this lays the points out (scales, ticks, colours),
so the page needs no charting script and reads the same without JavaScript."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

WIDTH, HEIGHT = 640, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 16, 12, 44
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    group: str = ""  # points of one group share a colour (and a line, when joined)
    label: str = ""
    href: str = ""


@dataclass
class Chart:
    x_label: str
    y_label: str
    marks: list[dict[str, object]] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # group, colour
    lines: list[tuple[str, str]] = field(default_factory=list)  # SVG points, colour
    width: int = WIDTH
    height: int = HEIGHT
    left: int = MARGIN_LEFT
    bottom: int = HEIGHT - MARGIN_BOTTOM


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(f for f in (1, 2, 5, 10) if raw <= step * f)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 2)]


def _text(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def layout(marks: list[Mark], x_label: str, y_label: str, *, join: bool = False) -> Chart:
    """Scales both axes to the marks (with round ticks), gives each group a colour, and with
    `join` draws each group's marks as a line in x order."""
    chart = Chart(x_label, y_label)
    if not marks:
        return chart
    xs, ys = _ticks(min(m.x for m in marks), max(m.x for m in marks)), _ticks(0, max(m.y for m in marks))
    x0, x1, y0, y1 = xs[0], xs[-1], ys[0], ys[-1]
    plot_w, plot_h = WIDTH - MARGIN_LEFT - MARGIN_RIGHT, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def px(x: float) -> float:
        return round(MARGIN_LEFT + (x - x0) / ((x1 - x0) or 1) * plot_w, 1)

    def py(y: float) -> float:
        return round(MARGIN_TOP + plot_h - (y - y0) / ((y1 - y0) or 1) * plot_h, 1)

    colours = {group: PALETTE[i % len(PALETTE)] for i, group in enumerate(dict.fromkeys(m.group for m in marks))}
    chart.legend = list(colours.items()) if len(colours) > 1 or next(iter(colours)) else []
    chart.x_ticks = [(px(x), _text(x)) for x in xs]
    chart.y_ticks = [(py(y), _text(y)) for y in ys]
    chart.marks = [
        {"cx": px(m.x), "cy": py(m.y), "colour": colours[m.group], "label": m.label, "href": m.href} for m in marks
    ]
    if join:
        for group, colour in colours.items():
            points = sorted((m for m in marks if m.group == group), key=lambda m: m.x)
            chart.lines.append((" ".join(f"{px(m.x)},{py(m.y)}" for m in points), colour))
    return chart


def spark(points: list[tuple[float, float]], now: float, span: float) -> str:
    """SVG polyline points of a 100 x 20 sparkline over the last `span` seconds, scaled to the
    largest value shown (points are (unix time, value))."""
    shown = [(at, value) for at, value in points if now - at <= span]
    top = max((value for _, value in shown), default=0.0) or 1.0
    return " ".join(f"{100 * (1 - (now - at) / span):.1f},{20 - 20 * value / top:.1f}" for at, value in shown)
