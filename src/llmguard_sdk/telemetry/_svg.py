"""Small dependency-free SVG charts for the HTML report: lines over time and grouped bars."""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping, Sequence

__all__ = ["bar_chart", "line_chart"]

_W, _H = 720, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 150, 16, 32
_COLOURS = (
    "#2f6fde",
    "#e0712c",
    "#2aa876",
    "#c23b5b",
    "#8a5cd6",
    "#b59a1f",
    "#2bb3c0",
    "#7a7a7a",
)
Points = Sequence[tuple[float, float]]


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value))) / 10 if value >= 1 else 1.0
    while magnitude > value:
        magnitude /= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _frame(
    title: str, y_max: float, y_fmt: Callable[[float], str], legend: Sequence[str], kind: str
) -> list[str]:
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    parts = [
        f'<svg class="chart" data-kind="{kind}" viewBox="0 0 {_W} {_H}" width="{_W}" '
        f'height="{_H}" role="img" aria-label="{_esc(title)}">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" class="area"/>',
    ]
    for step in range(5):
        value = y_max * step / 4
        y = _TOP + plot_h - plot_h * step / 4
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(_text(_LEFT - 6, y + 4, y_fmt(value), anchor="end"))
    for index, name in enumerate(legend):
        y = _TOP + 12 + index * 18
        colour = _COLOURS[index % len(_COLOURS)]
        parts.append(
            f'<rect x="{_W - _RIGHT + 12}" y="{y - 9}" width="10" height="10" fill="{colour}"/>'
        )
        parts.append(_text(_W - _RIGHT + 28, y, name[:18], css="legend"))
    return parts


def line_chart(
    title: str,
    series: Mapping[str, Points],
    *,
    y_fmt: Callable[[float], str] = lambda v: f"{v:g}",
    y_max: float | None = None,
) -> str:
    """Lines of ``(unix time, value)`` points, one per series, on a shared time axis."""
    points = [p for values in series.values() for p in values]
    if not points:
        return _empty(title)
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    x1 = x1 if x1 > x0 else x0 + 1
    top = y_max if y_max is not None else _nice_max(max(p[1] for p in points))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    parts = _frame(title, top, y_fmt, list(series), "line")

    def xy(point: tuple[float, float]) -> str:
        x = _LEFT + plot_w * (point[0] - x0) / (x1 - x0)
        y = _TOP + plot_h - plot_h * min(point[1], top) / top
        return f"{x:.1f},{y:.1f}"

    for index, values in enumerate(series.values()):
        colour = _COLOURS[index % len(_COLOURS)]
        ordered = sorted(values)
        coords = " ".join(xy(p) for p in ordered)
        parts.append(f'<polyline class="mark" points="{coords}" stroke="{colour}" fill="none"/>')
        if len(ordered) == 1:
            cx, cy = xy(ordered[0]).split(",")
            parts.append(f'<circle class="mark" cx="{cx}" cy="{cy}" r="3" fill="{colour}"/>')
    for x, anchor in ((x0, "start"), (x1, "end")):
        label = time.strftime("%Y-%m-%d %H:%M", time.gmtime(x))
        left = _LEFT if anchor == "start" else _LEFT + plot_w
        parts.append(_text(left, _H - 10, f"{label} UTC", anchor=anchor))
    parts.append("</svg>")
    return "\n".join(parts)


def bar_chart(
    title: str,
    groups: Mapping[str, Mapping[str, float]],
    *,
    y_fmt: Callable[[float], str] = lambda v: f"{v:g}",
) -> str:
    """Grouped bars: one group per key of ``groups``, one bar per series inside it."""
    names = list(dict.fromkeys(name for bars in groups.values() for name in bars))
    values = [v for bars in groups.values() for v in bars.values()]
    if not values:
        return _empty(title)
    top = _nice_max(max(values))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    parts = _frame(title, top, y_fmt, names, "bar")
    slot = plot_w / len(groups)
    width = slot * 0.8 / max(len(names), 1)
    for group_index, (group, bars) in enumerate(groups.items()):
        for index, name in enumerate(names):
            if name not in bars:
                continue
            height = plot_h * min(bars[name], top) / top
            x = _LEFT + slot * group_index + slot * 0.1 + width * index
            colour = _COLOURS[index % len(_COLOURS)]
            parts.append(
                f'<rect class="mark" x="{x:.1f}" y="{_TOP + plot_h - height:.1f}" '
                f'width="{width:.1f}" height="{max(height, 0.5):.1f}" fill="{colour}">'
                f"<title>{_esc(group)} {_esc(name)}: {_esc(y_fmt(bars[name]))}</title></rect>"
            )
        centre = _LEFT + slot * group_index + slot / 2
        parts.append(_text(centre, _H - 10, group[:16], anchor="middle"))
    parts.append("</svg>")
    return "\n".join(parts)


def _text(x: float, y: float, body: str, *, anchor: str = "start", css: str = "tick") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" class="{css}" text-anchor="{anchor}">{_esc(body)}</text>'


def _empty(title: str) -> str:
    return (
        f'<svg class="chart empty" viewBox="0 0 {_W} 60" width="{_W}" height="60" '
        f'aria-label="{_esc(title)}"><text x="20" y="35" class="tick">no data</text></svg>'
    )
