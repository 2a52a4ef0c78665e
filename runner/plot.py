"""The roofline chart: arithmetic intensity against attained FLOP/s, under both ceilings."""

from __future__ import annotations

from pathlib import Path

from .model import Report

_MIN_INTENSITY = 1e-2  # FLOP/byte floor for ops whose counted FLOPs are ~0 (pure data movement)


def roofline_png(report: Report | dict[str, Report], path: str | Path) -> Path:
    """One report, or several labelled ones (bench baselines) drawn in one chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    reports = report if isinstance(report, dict) else {"": report}
    report = next(iter(reports.values()))
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    peaks = report.device.peaks
    points = [(f"{label}:{op.name}" if label else op.name, s)
              for label, rep in reports.items() for op in rep.ops for s in op.shapes
              if s.roofline_fraction is not None and s.bytes]
    if peaks is None or not points:
        reason = "no GPU timing on this machine" if not report.timing_available else \
            "no timed shapes with a roofline"
        ax.text(0.5, 0.5, f"No roofline measured: {reason}", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    else:
        _draw(ax, report, points)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _draw(ax, report: Report, points) -> None:
    peaks = report.device.peaks
    compute = peaks.tflops["bf16"] * 1e12
    bandwidth = peaks.bandwidth_tbps * 1e12
    intensities = [max(_MIN_INTENSITY, (s.flops or 0) / s.bytes) for _, s in points]
    lo, hi = min(intensities + [1.0]) / 3, max(intensities + [compute / bandwidth * 10]) * 3
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(compute, bandwidth * x) for x in xs], color="black",
            label=f"{peaks.source}: {peaks.bandwidth_tbps:g} TB/s, bf16 {compute / 1e12:.0f} "
                  "TFLOP/s")
    measured = report.device.peaks_measured
    if measured:
        mc, mb = measured.tflops.get("bf16", 0) * 1e12, measured.bandwidth_tbps * 1e12
        ax.plot(xs, [min(mc, mb * x) for x in xs], color="gray", linestyle="--",
                label=f"measured: {measured.bandwidth_tbps:.2f} TB/s, bf16 {mc / 1e12:.0f}")
    for (name, shape), x in zip(points, intensities, strict=True):
        attained = shape.roofline_fraction * min(compute, bandwidth * x)
        ax.scatter([x], [attained], s=30)
        ax.annotate(f"{name}/{shape.id} ({shape.roofline_fraction:.2f})", (x, attained),
                    fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte; data-movement ops at the left edge)")
    ax.set_ylabel("attained FLOP/s equivalent (roofline fraction x attainable)")
    ax.set_title(f"Roofline: {report.device.name}")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
