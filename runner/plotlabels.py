"""Number labels beside chart points that overlap neither each other, the points nor the legend.

Greedy: each label tries offsets on rings of growing radius around its point and takes the first
whose text box (measured by matplotlib's renderer) is inside the axes and clear of everything
placed so far; a label further than the first ring gets a thin leader line to its point.
"""

from __future__ import annotations

import math

from matplotlib.transforms import Bbox, ScaledTranslation

RINGS_PT = (5, 9, 14, 20, 27, 35, 45, 58)
DIRECTIONS = 16
MARKER_HALF_PT = 3.5  # half the side of a point's marker box, in points


def marker_boxes(ax, points: list[tuple[float, float]]) -> list[Bbox]:
    """Display-space boxes around data points (obstacles for labels)."""
    half = MARKER_HALF_PT * ax.figure.dpi / 72
    boxes = []
    for x, y in points:
        px, py = ax.transData.transform((x, y))
        boxes.append(Bbox([[px - half, py - half], [px + half, py + half]]))
    return boxes


def place(ax, anchors: list[tuple[float, float, str]], obstacles: list[Bbox],
          fontsize: float = 7.5, color: str = "0.15") -> list:
    """Place one text per anchor (x, y, text in data coordinates); returns the Text artists.

    The figure's layout must be final (drawn once, layout engine off): positions are measured
    in display space.
    """
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = list(obstacles)
    texts = []
    for x, y, label in anchors:
        text = ax.text(x, y, label, fontsize=fontsize, color=color, zorder=5, clip_on=False)
        ring = _settle(ax, text, x, y, frame, taken, renderer)
        taken.append(text.get_window_extent(renderer).expanded(1.04, 1.08))
        if ring > 0:
            _leader(ax, text, x, y, renderer)
        texts.append(text)
    return texts


def _settle(ax, text, x: float, y: float, frame: Bbox, taken: list[Bbox], renderer) -> int:
    fallback = None
    for ring, radius in enumerate(RINGS_PT):
        for step in range(DIRECTIONS):
            angle = math.pi / 4 - 2 * math.pi * step / DIRECTIONS  # start up-right, clockwise
            _put(ax, text, x, y, radius, angle)
            box = text.get_window_extent(renderer)
            if not _inside(box, frame):
                continue
            if fallback is None:
                fallback = (ring, radius, angle)
            if not any(box.overlaps(other) for other in taken):
                return ring
    ring, radius, angle = fallback or (0, RINGS_PT[0], math.pi / 4)
    _put(ax, text, x, y, radius, angle)
    return ring


def _put(ax, text, x: float, y: float, radius: float, angle: float) -> None:
    dx, dy = radius * math.cos(angle), radius * math.sin(angle)
    text.set_horizontalalignment("left" if dx > 1 else "right" if dx < -1 else "center")
    text.set_verticalalignment("bottom" if dy > 1 else "top" if dy < -1 else "center")
    offset = ScaledTranslation(dx / 72, dy / 72, ax.figure.dpi_scale_trans)
    text.set_transform(ax.transData + offset)
    text.set_position((x, y))


def _inside(box: Bbox, frame: Bbox) -> bool:
    return (box.x0 >= frame.x0 + 1 and box.x1 <= frame.x1 - 1 and box.y0 >= frame.y0 + 1
            and box.y1 <= frame.y1 - 1)


def _leader(ax, text, x: float, y: float, renderer) -> None:
    box = text.get_window_extent(renderer)
    px, py = ax.transData.transform((x, y))
    # to the nearest point of the label's box, stopping short of the marker
    tx, ty = min(max(px, box.x0), box.x1), min(max(py, box.y0), box.y1)
    length = math.hypot(tx - px, ty - py)
    if length <= 0:
        return
    gap = MARKER_HALF_PT * ax.figure.dpi / 72 * 1.2
    sx, sy = px + (tx - px) * gap / length, py + (ty - py) * gap / length
    inverse = ax.transData.inverted()
    (x0, y0), (x1, y1) = inverse.transform((sx, sy)), inverse.transform((tx, ty))
    ax.plot([x0, x1], [y0, y1], color="0.6", linewidth=0.5, zorder=4)


def overlaps(texts: list, renderer) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts whose boxes intersect (for tests and checks)."""
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts
             if t.get_visible() and t.get_text().strip()]
    found = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            if _intersect(box_a, box_b):
                found.append((a, b))
    return found


def _intersect(a: Bbox, b: Bbox, tolerance: float = 0.5) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tolerance
            and min(a.y1, b.y1) - max(a.y0, b.y0) > tolerance)
