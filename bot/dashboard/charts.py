"""Line charts as inline SVG, rendered on the server: no script, no front-end build step.

Every point is a `<circle class="pt">` carrying its commit and value (`data-sha`, `data-value`)
and a `<title>` tooltip, so a reader (or a test in a browser) can tell which recorded number each
mark is; a regression is a red ring and a red triangle under the point. Missing values (an
operator that did not pass) break the line and show as a grey cross on the axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 32, 24, 34
REGRESSION = "#d1242f"
MISSING = "#8c959f"


@dataclass(frozen=True)
class Line:
    key: str  # data-series
    label: str
    color: str
    values: Sequence[float | None]
    regressions: frozenset[int] = field(default_factory=frozenset)  # point indexes
    dashed: bool = False


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    span = high - low
    if span <= 0:
        return [low]
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def line_chart(chart_id: str, title: str, shas: Sequence[str], lines: Sequence[Line],
               fmt: Callable[[float], str] = lambda v: f"{v:.3f}",
               y_max: float | None = None) -> Markup:
    """An SVG chart of `lines` over the commits `shas` (oldest left), y from 0."""
    values = [v for line in lines for v in line.values if v is not None]
    top = max([*values, y_max or 0.0]) or 1.0
    top *= 1.08
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + (plot_w / 2 if len(shas) == 1 else plot_w * i / (len(shas) - 1))

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{escape(chart_id)}" '
             f'data-chart="{escape(chart_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>"]
    parts += _axes(shas, top, x, y, fmt, plot_w)
    for line in lines:
        parts += _line(line, shas, x, y, fmt)
    parts.append(_legend(lines))
    parts.append("</svg>")
    return Markup("".join(parts))


def _axes(shas, top, x, y, fmt, plot_w) -> list[str]:
    parts = []
    for tick in _ticks(0.0, top / 1.08):
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tick):.1f}" '
                     f'y2="{y(tick):.1f}" stroke="#d0d7de" stroke-width="1"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="11" fill="#57606a">{escape(fmt(tick))}</text>')
    every = max(1, math.ceil(len(shas) / 12))
    for i, sha in enumerate(shas):
        if i % every == 0 or i == len(shas) - 1:
            parts.append(f'<text x="{x(i):.1f}" y="{HEIGHT - 14}" text-anchor="middle" '
                         f'font-size="10" font-family="monospace" fill="#57606a">'
                         f'{escape(sha[:7])}</text>')
    return parts


def _line(line: Line, shas, x, y, fmt) -> list[str]:
    parts, run = [], []
    dash = ' stroke-dasharray="5 4"' if line.dashed else ""
    for i, value in enumerate([*line.values, None]):
        if value is not None:
            run.append(f"{x(i):.1f},{y(value):.1f}")
            continue
        if len(run) > 1:
            parts.append(f'<polyline class="line" data-series="{escape(line.key)}" fill="none" '
                         f'stroke="{line.color}" stroke-width="2"{dash} '
                         f'points="{" ".join(run)}"/>')
        run = []
    for i, (sha, value) in enumerate(zip(shas, line.values, strict=False)):
        if value is None:
            parts.append(f'<text class="missing" data-series="{escape(line.key)}" '
                         f'data-sha="{escape(sha)}" x="{x(i):.1f}" y="{y(0) - 2:.1f}" '
                         f'text-anchor="middle" font-size="12" fill="{MISSING}">×'
                         f"<title>{escape(sha[:12])}: no value</title></text>")
            continue
        bad = i in line.regressions
        tip = f"{sha[:12]}: {line.label} {fmt(value)}" + (" (regression)" if bad else "")
        parts.append(f'<circle class="pt{" regressed" if bad else ""}" '
                     f'data-series="{escape(line.key)}" data-sha="{escape(sha)}" '
                     f'data-value="{value!r}" cx="{x(i):.1f}" cy="{y(value):.1f}" r="4" '
                     f'fill="{line.color}" stroke="{REGRESSION if bad else "#ffffff"}" '
                     f'stroke-width="{3 if bad else 1}"><title>{escape(tip)}</title></circle>')
        if bad:
            cx, cy = x(i), y(value) + 9
            parts.append(f'<path class="regression" data-series="{escape(line.key)}" '
                         f'data-sha="{escape(sha)}" d="M{cx - 6:.1f},{cy + 9:.1f} '
                         f'L{cx + 6:.1f},{cy + 9:.1f} L{cx:.1f},{cy:.1f} Z" '
                         f'fill="{REGRESSION}"/>')
    return parts


def _legend(lines: Sequence[Line]) -> str:
    parts, offset = [], LEFT
    for line in lines:
        parts.append(f'<rect x="{offset}" y="6" width="12" height="4" fill="{line.color}"/>'
                     f'<text x="{offset + 16}" y="12" font-size="11" fill="#24292f">'
                     f"{escape(line.label)}</text>")
        offset += 30 + 7 * len(line.label)
    return "".join(parts)
