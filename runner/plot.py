"""Figures for a slide: the roofline, the roofline fraction per operator and shape, and without GPU
timing the chart of what was checked. matplotlib (Agg), PNG.

- roofline: each timed shape at its arithmetic intensity (FLOPs and bytes the report carries)
  against attained TFLOP/s, under the datasheet and measured roofs; shapes with no FLOPs counted
  (data movement) in a strip of their own, as attained bandwidth against the bandwidth roofs.
  Points carry numbers; the key beside the chart names them.
- fractions: one bar per contestant (base and head for a PR, eager/compile/kb for `bench`) per
  operator and shape, rows in the order of the GPU-hours at stake, with that stake beside them.
- checks (no timing): per operator and shape the status, own-kernel share and max relative error.

Every chart takes one Report or {label: Report}; the data stage is runner/plotdata.py.
"""

from __future__ import annotations

import io
from pathlib import Path

from .model import Report, Status
from .plotdata import (
    Row,
    as_series,
    ceilings,
    lead_report,
    primary_label,
    rows,
    timing_available,
)

DPI = 150
WIDTH_IN = 12.0
SERIES_STYLE = {  # label -> (colour, marker, filled)
    "": ("C0", "o", True), "head": ("C0", "o", True), "base": ("0.55", "o", False),
    "kb": ("C0", "^", True), "eager": ("C1", "o", True), "compile": ("C2", "s", True),
    "library": ("C4", "D", True),
}
EXTRA_STYLES = [("C3", "v", True), ("C5", "P", True), ("C6", "X", True)]
STATUS_COLOR = {
    Status.PASS: "#2ca02c", Status.INCORRECT: "#d62728", Status.FALLBACK: "#ff7f0e",
    Status.SUSPICIOUS: "#9467bd", Status.COMPILE_ERROR: "#8c564b",
    Status.RUNTIME_ERROR: "#e377c2", Status.TIMEOUT: "#7f7f7f",
}
CEILING_COLOR = {"bf16": "black", "fp8": "#8c564b", "fp32": "#7f7f7f", "tf32": "#17becf",
                 "int8": "#bcbd22", "fp64": "#aaaaaa"}


def roofline_png(reports: Report | dict[str, Report], path: str | Path,
                 note: str | None = None) -> str | Path:
    return _save(roofline_figure(reports, note), path)


def fractions_png(reports: Report | dict[str, Report], path: str | Path,
                  note: str | None = None) -> str | Path:
    return _save(fractions_figure(reports, note), path)


def _save(fig, path: str | Path) -> str | Path:
    import matplotlib.pyplot as plt

    from .output import write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plt.close(fig)
    write_bytes(path, buffer.getvalue())
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def style(label: str, index: int = 0) -> tuple[str, str, bool]:
    return SERIES_STYLE.get(label) or EXTRA_STYLES[index % len(EXTRA_STYLES)]


def _device_line(report: Report, note: str | None) -> str:
    d = report.device
    parts = [d.name]
    if d.kind != "cuda":
        parts.append("CPU run: no timing")
    elif d.peaks:
        parts.append(f"datasheet {d.peaks.bandwidth_tbps:g} TB/s, bf16 "
                     f"{d.peaks.tflops.get('bf16', 0):g} TFLOP/s")
    if d.kind == "cuda" and d.peaks_measured:
        parts.append(f"measured {d.peaks_measured.bandwidth_tbps:.2f} TB/s, bf16 "
                     f"{d.peaks_measured.tflops.get('bf16', 0):.0f} TFLOP/s")
    parts += [f"torch {d.torch}"] if d.torch else []
    return " · ".join(parts) + (f"\n{note}" if note else "")


# --- roofline ----------------------------------------------------------------------------------

def roofline_figure(reports: Report | dict[str, Report], note: str | None = None):
    series = as_series(reports)
    shape_rows = rows(series)
    plotted = [r for r in shape_rows if r.bytes and any(m.timed for m in r.marks.values())]
    if not timing_available(series) or not plotted:
        return checks_figure(series, note)
    plt = _pyplot()
    first = lead_report(series)
    compute = [r for r in plotted if r.intensity is not None]
    movement = [r for r in plotted if r.intensity is None]
    key_lines = _key_lines(shape_rows, series, plotted)
    # widths in inches: the strip grows with its columns, the key with its longest line
    widths = ([0.9 + 0.2 * len(movement) if compute else 6.5] if movement else []) + \
        ([6.0] if compute else []) + [0.3 + KEY_CHAR_IN * max(len(t) for t in key_lines)]
    height = max(5.2, 2.2 + 0.17 * len(key_lines))
    fig = plt.figure(figsize=(max(WIDTH_IN, sum(widths) + 1.2), height), dpi=DPI,
                     layout="constrained")
    grid = fig.add_gridspec(1, len(widths), width_ratios=widths)
    axes = [fig.add_subplot(grid[0, i]) for i in range(len(widths))]
    roofs = ceilings(first, shape_rows)
    main = axes[-2] if compute else None
    handles = _draw_main(main, compute, series, roofs) if main is not None else []
    if movement:
        strip_handles = _draw_strip(axes[0], movement, series, roofs)
        handles = handles or strip_handles
    fig.suptitle(f"Roofline · {_device_line(first, note)}", fontsize=10)
    _freeze(fig)
    if main is not None:
        _number_points(main, compute, series)
    _draw_key(axes[-1], key_lines, series, handles)
    return fig


def _freeze(fig) -> None:
    """Run the layout once and keep it, so text placed afterwards is measured where it stays."""
    fig.canvas.draw()
    fig.set_layout_engine("none")


def _marks(row: Row, series: dict[str, Report]):
    for index, label in enumerate(series):
        mark = row.marks.get(label)
        if mark is not None and mark.timed:
            yield index, label, mark


def _scatter(ax, x: float, y: float, label: str, index: int) -> None:
    colour, marker, filled = style(label, index)
    ax.scatter([x], [y], s=34, marker=marker, zorder=3, linewidths=1.1,
               facecolors=colour if filled else "white", edgecolors=colour)


def _connect(ax, points: list[tuple[float, float, str]]) -> None:
    """Join one shape's contestants; base -> head as an arrow."""
    if len(points) < 2:
        return
    by_label = {label: (x, y) for x, y, label in points}
    if "base" in by_label and "head" in by_label:
        ax.annotate("", xy=by_label["head"], xytext=by_label["base"], zorder=2,
                    arrowprops={"arrowstyle": "-|>", "color": "0.45", "lw": 0.8,
                                "shrinkA": 4, "shrinkB": 4})
        return
    ax.plot([x for x, _, _ in points], [y for _, y, _ in points], color="0.75",
            linewidth=0.8, zorder=2)


def _draw_main(ax, compute: list[Row], series, roofs) -> list:
    intensities = [r.intensity for r in compute]
    ridges = [c.ridge for c in roofs] or [1.0]
    lo = min(intensities + [min(ridges)]) / 4
    hi = max(intensities + [max(ridges)]) * 4
    xs = [lo * (hi / lo) ** (i / 300) for i in range(301)]
    handles = [_roof_line(ax, xs, c) for c in roofs]
    attained = []
    for row in compute:
        points = []
        for index, label, mark in _marks(row, series):
            y = row.attained_flops(mark) / 1e12
            _scatter(ax, row.intensity, y, label, index)
            points.append((row.intensity, y, label))
            attained.append(y)
        _connect(ax, points)
    top = max([c.tflops for c in roofs] + attained)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(attained) / 3, top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP/byte; FLOPs counted on the reference)", fontsize=9)
    ax.set_ylabel("attained TFLOP/s", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return handles


def _roof_line(ax, xs: list[float], roof):
    bandwidth, rate = roof.bandwidth_tbps, roof.tflops
    measured = roof.source == "measured"
    label = (f"{roof.source} roof: {bandwidth:.3g} TB/s, {roof.dtype} {rate:.0f} TFLOP/s")
    (line,) = ax.plot(xs, [min(rate, bandwidth * x) for x in xs],
                      color=CEILING_COLOR.get(roof.dtype, "black"),
                      linestyle="--" if measured else "-", linewidth=1.2 if measured else 1.4,
                      label=label, zorder=1.5 if roof.dtype == "bf16" else 1)
    return line


def _draw_strip(ax, movement: list[Row], series, roofs) -> list:
    """Shapes with no FLOPs counted: attained bandwidth (bytes / time) against the bandwidth
    roofs, one column per shape, the column labelled with the shape's number."""
    handles = []
    for source in dict.fromkeys(c.source for c in roofs):
        bandwidth = next(c.bandwidth_tbps for c in roofs if c.source == source)
        measured = source == "measured"
        line = ax.axhline(bandwidth, color="black", linestyle="--" if measured else "-",
                          linewidth=1.2 if measured else 1.4,
                          label=f"{source} roof: {bandwidth:.3g} TB/s", zorder=1)
        handles.append(line)
    spread = 0.22
    count = len(series)
    top = max([c.bandwidth_tbps for c in roofs] or [1.0])
    for position, row in enumerate(movement, start=1):
        points = []
        for index, label, mark in _marks(row, series):
            x = position + (index - (count - 1) / 2) * spread / max(1, count - 1) * 2 \
                if count > 1 else position
            y = row.attained_tbps(mark)
            top = max(top, y)
            _scatter(ax, x, y, label, index)
            points.append((x, y, label))
        _connect(ax, points)
    ax.set_xlim(0.4, len(movement) + 0.6)
    ax.set_ylim(0, top * 1.12)
    ax.set_xticks(range(1, len(movement) + 1), [str(r.number) for r in movement], fontsize=7.5)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("shape (number in the key)", fontsize=9)
    ax.set_ylabel("attained bandwidth, TB/s", fontsize=9)
    ax.set_title("no FLOPs counted (data movement)", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    return handles


def _number_points(ax, compute: list[Row], series) -> None:
    from .plotlabels import marker_boxes, place

    anchors, points = [], []
    for row in compute:
        ys = [row.attained_flops(m) / 1e12 for _, _, m in _marks(row, series)]
        points += [(row.intensity, y) for y in ys]
        anchors.append((row.intensity, max(ys), str(row.number)))
    place(ax, anchors, marker_boxes(ax, points))


def _series_handles(series: dict[str, Report]) -> list:
    from matplotlib.lines import Line2D

    if len(series) < 2:
        return []
    handles = []
    for index, label in enumerate(series):
        colour, marker, filled = style(label, index)
        handles.append(Line2D([], [], linestyle="none", marker=marker, markersize=6,
                              markerfacecolor=colour if filled else "white",
                              markeredgecolor=colour, label=label))
    return handles


KEY_CHAR_IN = 7.5 * 0.6 / 72  # width of one character of the monospace key at 7.5 pt
NAME_CHARS = 46


def _key_lines(shape_rows: list[Row], series, plotted: list[Row]) -> list[str]:
    shown = {id(r) for r in plotted}
    single = len(series) == 1
    lines = ["key: no. operator / shape" + (" · roofline fraction" if single else "")]
    for row in shape_rows:
        name = row.name if len(row.name) <= NAME_CHARS else row.name[:NAME_CHARS - 1] + "…"
        text = f"{row.number:>2}  {name}"
        mark = next(iter(row.marks.values()))
        if id(row) not in shown:
            text += f"  — {mark.status.value if mark.status is not Status.PASS else 'not timed'}"
        elif single and mark.fraction is not None:
            text += f"  {mark.fraction:.2f}"
        lines.append(text)
    return lines


def _draw_key(ax, lines: list[str], series, roof_handles: list) -> None:
    """Legend (contestants, roofs) on top, then one line per numbered shape."""
    ax.set_axis_off()
    legend = ax.legend(handles=_series_handles(series) + roof_handles, loc="upper left",
                       fontsize=7.5, frameon=False, borderaxespad=0, handlelength=2.2)
    renderer = ax.figure.canvas.get_renderer()
    legend_box = legend.get_window_extent(renderer).transformed(ax.transAxes.inverted())
    ax.text(0, legend_box.y0 - 0.03, "\n".join(lines), transform=ax.transAxes, va="top",
            ha="left", fontsize=7.5, family="monospace", linespacing=1.35)


# --- roofline fraction bars --------------------------------------------------------------------

def fractions_figure(reports: Report | dict[str, Report], note: str | None = None):
    series = as_series(reports)
    shape_rows = rows(series)
    if not timing_available(series):
        return checks_figure(series, note)
    plt = _pyplot()
    first = lead_report(series)
    labels = list(series)
    row_in = 0.12 * len(labels) + 0.12
    fig = plt.figure(figsize=(WIDTH_IN, 1.9 + row_in * len(shape_rows)), dpi=DPI,
                     layout="constrained")
    grid = fig.add_gridspec(1, 2, width_ratios=[8.5, 1.2])
    ax = fig.add_subplot(grid[0, 0])
    stake_ax = fig.add_subplot(grid[0, 1], sharey=ax)
    top = _draw_bars(ax, shape_rows, labels)
    ax.set_xlim(0, top)
    ax.axvline(1.0, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("roofline fraction T_SOL / T (datasheet peaks; 1 = at the roofline)",
                  fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    _draw_stakes(stake_ax, shape_rows, first)
    primary = primary_label(series)
    order = "GPU-hours at stake" + (f" ({primary})" if len(series) > 1 else "")
    fig.suptitle(f"Roofline fraction per operator and shape, by {order}\n"
                 f"{_device_line(first, note)}", fontsize=10)
    handles = _series_handles(series)
    if handles or any(m.fraction_measured is not None for r in shape_rows
                      for m in r.marks.values()):
        _bar_legend(fig, labels, shape_rows)
    return fig


def _draw_bars(ax, shape_rows: list[Row], labels: list[str]) -> float:
    count = len(labels)
    height = 0.8 / count
    top = 1.0
    for position, row in enumerate(shape_rows):
        base_y = len(shape_rows) - 1 - position
        for index, label in enumerate(labels):
            y = base_y + 0.4 - height * (index + 0.5)
            mark = row.marks.get(label)
            colour, _, filled = style(label, index)
            if mark is None:
                continue
            if mark.fraction is None or not mark.timed:
                reason = mark.status.value if mark.status is not Status.PASS else "not timed"
                ax.text(0.005, y, f"{label + ': ' if count > 1 else ''}{reason}", fontsize=6.5,
                        va="center", ha="left", color=STATUS_COLOR.get(mark.status, "black"))
                continue
            ax.barh(y, mark.fraction, height=height * 0.9, color=colour if filled else "white",
                    edgecolor=colour, linewidth=0.8)
            if mark.fraction_measured is not None and mark.fraction_measured > mark.fraction:
                ax.barh(y, mark.fraction_measured - mark.fraction, left=mark.fraction,
                        height=height * 0.9, color=colour, alpha=0.3, linewidth=0)
            end = max(mark.fraction, mark.fraction_measured or 0)
            text = f"{mark.fraction:.2f}"
            if mark.fraction_measured is not None:
                text += f" ({mark.fraction_measured:.2f})"
            ax.text(end + 0.008, y, text, fontsize=6.5, va="center", ha="left")
            top = max(top, mark.fraction, mark.fraction_measured or 0)
    ax.set_yticks(range(len(shape_rows)),
                  [f"{r.number:>2}  {r.name}" for r in reversed(shape_rows)], fontsize=7.5)
    ax.set_ylim(-0.6, len(shape_rows) - 0.4)
    return top * 1.12


def _draw_stakes(ax, shape_rows: list[Row], first: Report) -> None:
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    for position, row in enumerate(shape_rows):
        text = "—" if row.stake_hours is None else f"{row.stake_hours:.3g}"
        ax.text(0.05, len(shape_rows) - 1 - position, text, fontsize=7.5, va="center",
                ha="left")
    ax.set_title(f"GPU-h at stake\n({first.gpu_hours_unit})", fontsize=8)


def _bar_legend(fig, labels: list[str], shape_rows: list[Row]) -> None:
    from matplotlib.patches import Patch

    handles = []
    if len(labels) > 1:
        for index, label in enumerate(labels):
            colour, _, filled = style(label, index)
            handles.append(Patch(facecolor=colour if filled else "white", edgecolor=colour,
                                 label=label))
    if any(m.fraction_measured is not None for r in shape_rows for m in r.marks.values()):
        handles.append(Patch(facecolor="0.5", alpha=0.3,
                             label="(lighter, in brackets) against measured ceilings"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8,
               frameon=False)


# --- what was checked (no timing) --------------------------------------------------------------

def checks_figure(reports: Report | dict[str, Report], note: str | None = None):
    series = as_series(reports)
    shape_rows = rows(series)
    plt = _pyplot()
    first = lead_report(series)
    labels = list(series)
    row_in = 0.13 * len(labels) + 0.13
    fig = plt.figure(figsize=(WIDTH_IN, 2.0 + row_in * len(shape_rows)), dpi=DPI,
                     layout="constrained")
    grid = fig.add_gridspec(1, 2, width_ratios=[5, 3])
    share_ax = fig.add_subplot(grid[0, 0])
    error_ax = fig.add_subplot(grid[0, 1], sharey=share_ax)
    _draw_checks(share_ax, error_ax, shape_rows, labels)
    why = "no GPU timing" if not timing_available(series) else "no shape was timed"
    fig.suptitle(f"What was checked ({why}): status, own-kernel share, error per operator and "
                 f"shape\n{_device_line(first, note)}", fontsize=10)
    _status_legend(fig, shape_rows, labels)
    return fig


def _draw_checks(share_ax, error_ax, shape_rows: list[Row], labels: list[str]) -> None:
    count = len(labels)
    height = 0.8 / count
    errors: list[float] = []
    exact: list[float] = []
    for position, row in enumerate(shape_rows):
        base_y = len(shape_rows) - 1 - position
        for index, label in enumerate(labels):
            mark = row.marks.get(label)
            if mark is None:
                continue
            y = base_y + 0.4 - height * (index + 0.5)
            colour = STATUS_COLOR[mark.status]
            prefix = f"{label}: " if count > 1 else ""
            share = mark.own_share
            if share is not None:
                share_ax.barh(y, share, height=height * 0.9, color=colour)
            text = f"{prefix}{'n/a (not measured)' if share is None else f'{share:.0%}'}"
            if mark.status is not Status.PASS:
                text += f" · {mark.status.value}"
            share_ax.text((share or 0) + 0.01, y, text, fontsize=6.5, va="center", ha="left",
                          color="black" if mark.status is Status.PASS else colour)
            if mark.max_rel_error:
                error_ax.scatter([mark.max_rel_error], [y], s=22, color=colour, zorder=3,
                                 marker=style(label, index)[1])
                errors.append(mark.max_rel_error)
            elif mark.max_rel_error == 0:
                exact.append(y)
    share_ax.set_xlim(0, 1.3)
    share_ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"])
    share_ax.set_xlabel("own-kernel share (work done by the repository's own kernels)",
                        fontsize=9)
    share_ax.set_yticks(range(len(shape_rows)),
                        [f"{r.number:>2}  {r.name}" for r in reversed(shape_rows)], fontsize=7.5)
    share_ax.set_ylim(-0.6, len(shape_rows) - 0.4)
    share_ax.grid(True, axis="x", alpha=0.3)
    share_ax.tick_params(axis="x", labelsize=8)
    _log_decades(error_ax, errors)
    if not errors and not exact:
        error_ax.text(0.5, 0.5, "no error recorded\n(no shape got to a comparison)",
                      transform=error_ax.transAxes, ha="center", va="center", fontsize=8,
                      color="0.3")
    for y in exact:  # bit-exact outputs (integers, copies) have no place on a log axis
        error_ax.text(0.02, y, "exact", transform=error_ax.get_yaxis_transform(), fontsize=6.5,
                      va="center", ha="left", color="0.3")
    error_ax.set_xlabel("max relative error (vs the reference)", fontsize=9)
    error_ax.tick_params(axis="y", labelleft=False)
    error_ax.tick_params(axis="x", labelsize=8)
    error_ax.grid(True, axis="x", alpha=0.3)


def _log_decades(ax, values: list[float]) -> None:
    """A log axis over whole decades, labelled only at decades (minor labels collide)."""
    import math

    from matplotlib.ticker import LogLocator, NullFormatter

    ax.set_xscale("log")
    if values:
        lo = 10 ** math.floor(math.log10(min(values)) - 0.3)
        hi = 10 ** math.ceil(math.log10(max(values)) + 0.3)
        ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _status_legend(fig, shape_rows: list[Row], labels: list[str]) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    present = {m.status for r in shape_rows for m in r.marks.values()}
    handles = [Patch(color=STATUS_COLOR[s], label=s.value) for s in Status if s in present]
    if len(labels) > 1:
        handles += [Line2D([], [], linestyle="none", marker=style(label, index)[1],
                           color="0.3", label=f"{label} (error)")
                    for index, label in enumerate(labels)]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8),
               fontsize=8, frameon=False)
