"""The figures, rendered from committed reports and checked for what they contain: the axes, the
number of marks, the numbered key, the bars in GPU-hours order, and no two texts overlapping or
cut off at the edge (measured from matplotlib's own text extents)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from atrex.runner.model import Report, Status  # noqa: E402
from atrex.runner.plot import (  # noqa: E402
    checks_figure,
    fractions_figure,
    fractions_png,
    roofline_figure,
    roofline_png,
)
from atrex.runner.plotdata import rows  # noqa: E402
from atrex.runner.plotlabels import overlaps  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "docs" / "img" / "data"


def _load(path: Path) -> Report:
    return Report.from_json(path.read_text())


@pytest.fixture(scope="module")
def examples_gpu() -> Report:
    return _load(RESULTS / "h200-judge" / "examples-h200.json")


@pytest.fixture(scope="module")
def examples_base() -> Report:
    return _load(RESULTS / "h200-runner" / "examples-h200.json")


@pytest.fixture(scope="module")
def suite_bench() -> dict[str, Report]:
    doc = json.loads((DATA / "suite-h200-illustrative.json").read_text())
    return {label: Report.from_dict(r) for label, r in doc["reports"].items()}


def _drawn_texts(fig) -> list[Text]:
    """The texts a render of the figure draws (tick labels outside the view are not drawn)."""
    drawn: dict[int, Text] = {}
    original = Text.draw

    def record(self, renderer):
        drawn[id(self)] = self
        return original(self, renderer)

    Text.draw = record
    try:
        fig.canvas.draw()
    finally:
        Text.draw = original
    return [t for t in drawn.values() if t.get_visible() and t.get_text().strip()]


def _assert_readable(fig) -> None:
    """No two texts overlap; none is cut off by the figure's edge."""
    texts = _drawn_texts(fig)
    renderer = fig.canvas.get_renderer()
    assert not overlaps(texts, renderer), overlaps(texts, renderer)
    frame = fig.bbox
    for text in texts:
        box = text.get_window_extent(renderer)
        assert box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1, text.get_text()
        assert box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1, text.get_text()


def _marks(ax) -> int:
    return sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))


def _bars(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0]


def test_examples_roofline_draws_data_movement_in_its_own_strip(examples_gpu, tmp_path):
    fig = roofline_figure(examples_gpu)
    try:
        strip, key = fig.axes  # every shape counts 0 FLOPs: no log-log panel, no fake intensity
        assert strip.get_yscale() == "linear" and "bandwidth" in strip.get_ylabel()
        assert _marks(strip) == 8
        assert [t.get_text() for t in strip.get_xticklabels()] == [str(n) for n in range(1, 9)]
        ceilings = [line.get_ydata()[0] for line in strip.get_lines()]
        assert 4.8 in ceilings  # the datasheet roof (4.8 TB/s) as a line, not a point
        key_text = "\n".join(t.get_text() for t in key.texts)
        for row in rows({"": examples_gpu}):
            assert f"{row.number:>2}  {row.name}" in key_text
        _assert_readable(fig)
    finally:
        plt.close(fig)
    path = roofline_png(examples_gpu, tmp_path / "r.png")
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_suite_roofline_puts_each_point_at_its_intensity(suite_bench):
    fig = roofline_figure(suite_bench)
    try:
        strip, main, key = fig.axes
        assert main.get_xscale() == "log" and main.get_yscale() == "log"
        shape_rows = rows(suite_bench)
        compute = [r for r in shape_rows if r.intensity and any(m.timed for m in
                                                                  r.marks.values())]
        movement = [r for r in shape_rows if not r.intensity and any(
            m.timed for m in r.marks.values())]
        assert _marks(main) == sum(m.timed for r in compute for m in r.marks.values())
        assert _marks(strip) == sum(m.timed for r in movement for m in r.marks.values())
        xs = {round(float(x), 6) for c in main.collections if isinstance(c, PathCollection)
              for x, _ in c.get_offsets()}
        assert xs == {round(r.intensity, 6) for r in compute}
        numbers = {t.get_text() for t in main.texts}
        assert numbers == {str(r.number) for r in compute}
        roof_labels = [line.get_label() for line in main.get_lines()
                       if "roof" in line.get_label()]
        assert len(roof_labels) == 4  # datasheet and measured, bf16 and fp8 (the fp8 GEMM/MoE)
        assert any(label.startswith("measured") for label in roof_labels)
        _assert_readable(fig)
    finally:
        plt.close(fig)


def test_fraction_bars_are_sorted_by_gpu_hours_at_stake(suite_bench):
    fig = fractions_figure(suite_bench)
    try:
        ax, stakes_ax = fig.axes
        shape_rows = rows(suite_bench)
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == [f"{r.number:>2}  {r.name}" for r in reversed(shape_rows)]
        stakes = [r.stake_hours for r in shape_rows if r.stake_hours is not None]
        assert stakes == sorted(stakes, reverse=True) and len(stakes) >= 15
        with_fraction = sum(m.fraction is not None for r in shape_rows for m in r.marks.values())
        with_measured = sum(m.fraction_measured is not None and m.fraction is not None and
                            m.fraction_measured > m.fraction
                            for r in shape_rows for m in r.marks.values())
        assert len(_bars(ax)) == with_fraction + with_measured
        failed = [t.get_text() for t in ax.texts if "runtime_error" in t.get_text()]
        assert len(failed) == 9  # three decode shapes crashed for all three contestants
        _assert_readable(fig)
    finally:
        plt.close(fig)


def test_pr_bars_show_base_and_head(examples_base, examples_gpu, tmp_path):
    fig = fractions_figure({"base": examples_base, "head": examples_gpu})
    try:
        ax = fig.axes[0]
        assert len(ax.get_yticklabels()) == 8
        solid = [b for b in _bars(ax) if b.get_alpha() is None]
        assert len(solid) == 16  # base and head for each of the 8 shapes
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert legend[:2] == ["base", "head"]
        _assert_readable(fig)
    finally:
        plt.close(fig)
    out = tmp_path / "pr.png"
    fractions_png({"base": examples_base, "head": examples_gpu}, out)
    assert out.stat().st_size > 10_000


@pytest.mark.parametrize("name", ["examples-cpu.json", "suite-cpu.json"])
def test_cpu_reports_get_the_chart_of_what_was_checked(name):
    report = _load(DATA / name)
    assert not report.timing_available
    for figure in (roofline_figure, fractions_figure, checks_figure):
        fig = figure(report)
        try:
            share_ax, error_ax = fig.axes
            assert "own-kernel share" in share_ax.get_xlabel()
            assert error_ax.get_xscale() == "log"
            shapes = [s for op in report.ops for s in op.shapes]
            assert len(_bars(share_ax)) == sum(s.own_kernel_share is not None for s in shapes)
            assert len(share_ax.get_yticklabels()) == len(shapes)
            assert _marks(error_ax) == sum(bool(s.max_rel_error) for s in shapes)
            assert "no GPU timing" in fig._suptitle.get_text()
            _assert_readable(fig)
        finally:
            plt.close(fig)


def test_checks_chart_names_every_non_pass_status(suite_bench):
    broken = {label: Report.from_dict(report.to_dict()) for label, report in suite_bench.items()}
    for report in broken.values():  # the same results as if no GPU had timed them
        report.timing_available = False
    fig = checks_figure(broken)
    try:
        statuses = {t.get_text() for t in fig.legends[0].get_texts()}
        assert {Status.PASS.value, Status.INCORRECT.value, Status.RUNTIME_ERROR.value,
                Status.SUSPICIOUS.value, Status.COMPILE_ERROR.value} <= statuses
        _assert_readable(fig)
    finally:
        plt.close(fig)


def test_overlap_measure_catches_the_old_label_per_point(suite_bench):
    """The measure the tests rely on: the chart before numbered labels (the full name beside
    every point at one fixed offset) has overlapping labels at the suite's size."""
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    try:
        for row in rows(suite_bench):
            for mark in row.marks.values():
                if mark.timed and row.intensity:
                    y = row.attained_flops(mark)
                    ax.scatter([row.intensity], [y])
                    ax.annotate(f"{mark.series}:{row.name} ({mark.fraction:.2f})",
                                (row.intensity, y), fontsize=7, xytext=(4, 4),
                                textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        assert overlaps(_drawn_texts(fig), fig.canvas.get_renderer())
    finally:
        plt.close(fig)
