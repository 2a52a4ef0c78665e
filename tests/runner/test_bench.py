"""`atrex bench` end to end on the CPU: baselines judged and reported, timing unavailable."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from atrex.runner.bench import bench_document, bench_markdown, run_bench
from atrex.runner.cli import _bench_keeper, _partial_bench_writer
from atrex.runner.evaluate import EvalOptions
from atrex.runner.repo import load_repo

ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_end_to_end_without_gpu(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "atrex", "bench", "examples/kernels", "--op", "rmsnorm",
         "--baselines", "eager,compile,kb", "--compile-mode", "default", "--device", "cpu",
         "--json", str(out), "--markdown", "-", "--plot", str(tmp_path / "bench.png"),
         "--bars", str(tmp_path / "bars.png")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["baselines"] == ["eager", "compile", "kb"] and not doc["timing_available"]
    assert doc["complete"] and doc["not_evaluated"] == []
    assert doc["compile_cache"] is None  # every run compiles afresh unless --compile-cache
    (instance,) = doc["instances"]
    assert instance["op"] == "rmsnorm" and instance["weight"] is not None
    for label in ("eager", "compile", "kb"):
        shapes = instance["results"][label]["shapes"]
        assert shapes and all(s["status"] == "pass" and s["time_ms"] is None
                              for s in shapes.values()), shapes
    # where the judge's wall time went (what a device lease must hold): each contestant's
    # executor start-up and checks, within the shape's whole time
    (shape_id,) = instance["results"]["kb"]["shapes"]
    checks = [instance["results"][label]["shapes"][shape_id]["check_wall_s"]
              for label in ("eager", "compile", "kb")]
    whole = instance["results"]["kb"]["shapes"][shape_id]["shape_wall_s"]
    assert all(c > 0 for c in checks) and sum(checks) <= whole
    assert all(instance["results"][label]["load_wall_s"] > 0 for label in ("eager", "kb"))
    assert "Judge wall time: " in result.stdout and "over 1 shapes" in result.stdout
    assert result.stdout.startswith("## atrex bench") and "n/a (no GPU)" in result.stdout
    assert "Weight (% of GPU time)" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("atrex bench: [")]
    assert [line.split("] ")[1].split(" (")[0] for line in progress] == ["rmsnorm / cpu-small"]
    for png in ("bench.png", "bars.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_bench_rejects_unknown_baseline():
    result = subprocess.run([sys.executable, "-m", "atrex", "bench", "examples/kernels",
                             "--baselines", "eager,triton"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "unknown ['triton']" in result.stderr


@pytest.mark.slow
def test_library_contestant_runs_where_it_has_a_cpu_path_and_is_absent_elsewhere(tmp_path):
    """The GEMM, FP8 (GEMM and MoE), attention, RoPE and SwiGLU peers run on the CPU (CPU BLAS,
    `torch._scaled_mm` row-wise per K block, SDPA's CPU kernel, Liger-Kernel's Triton kernels
    under the interpreter) and are judged like the eager baseline; an instance with no
    library.py is `absent` with the reason, in the JSON and the Markdown column. Liger's SwiGLU
    multiplies in bfloat16, which Triton's own interpreter computes on bit patterns (NaNs for
    finite inputs): it passes because the executor makes bfloat16 arithmetic work on values
    (runner/executor/interp_bf16.py)."""
    out = tmp_path / "bench.json"
    with_peer = ["gemm_decode", "fp8_block_gemm", "fp8_fused_moe", "prefill_attention_gqa",
                 "paged_decode_gqa", "mla_paged_decode", "rope", "silu_and_mul"]
    ops = [*with_peer, "kv_cache_append"]
    result = subprocess.run(
        [sys.executable, "-m", "atrex", "bench", "benchmarks/suite", "--baselines",
         "eager,library", "--device", "cpu", "--json", str(out), "--markdown", "-",
         *[arg for op in ops for arg in ("--op", op)]],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == "1.5" and doc["baselines"] == ["eager", "library"]
    results = {inst["op"]: inst["results"]["library"] for inst in doc["instances"]}
    for op in with_peer:
        assert results[op]["status"] == "pass", results[op]
        for shape in results[op]["shapes"].values():
            assert shape["reference_max_abs_error"] is not None
    fp8 = next(iter(results["fp8_block_gemm"]["shapes"].values()))
    assert fp8["implementation"] == "torch._scaled_mm, row-wise per K block", fp8
    moe = next(iter(results["fp8_fused_moe"]["shapes"].values()))
    assert moe["implementation"].startswith("torch._scaled_mm per expert, row-wise"), moe
    assert "What the baselines say they ran:" in result.stdout
    assert results["kv_cache_append"]["status"] == "absent"
    assert results["kv_cache_append"]["absent_reason"] == "no library.py in kv_cache_append/"
    assert "| library fraction (time) |" in result.stdout
    assert "absent (no library.py in kv_cache_append/)" in result.stdout
    assert "over 3 of 4 instances" not in result.stdout  # no GPU: no weighted numbers


UNAVAILABLE_OP = {
    "reference.py": "import torch\n\n\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, x):\n        return x * 2\n",
    "input.py": "import torch\n\n\ndef _make_inputs(n):\n"
                "    return {'x': torch.randn(n, device='cuda')}\n",
    "kernel.py": "from reference import Model  # noqa: F401\n",
    "library.py": "class LibraryUnavailable(RuntimeError):\n    pass\n\n\n"
                  "raise LibraryUnavailable('needs torch._fancy_op, not in this torch')\n",
    "shapes.json": json.dumps({"a": {"input_kwargs": {"n": 8}},
                               "b": {"input_kwargs": {"n": 16}}}),
}


def test_a_library_peer_this_machine_cannot_run_is_absent_with_the_reason(tmp_path):
    op = tmp_path / "double"
    op.mkdir()
    for name, text in UNAVAILABLE_OP.items():
        (op / name).write_text(text)
    repo = load_repo(tmp_path)
    reports = run_bench(repo, ["eager", "library"], EvalOptions(device="cpu", trials=1))
    doc = bench_document(repo, reports, ["eager", "library"], "default")
    (instance,) = doc["instances"]
    library = instance["results"]["library"]
    assert instance["results"]["eager"]["status"] == "pass"
    assert library["status"] == "absent"
    assert "needs torch._fancy_op" in library["absent_reason"]
    assert {s["status"] for s in library["shapes"].values()} == {"absent"}
    assert "absent (needs torch._fancy_op, not in this torch)" in bench_markdown(doc)


def test_the_bench_document_is_rewritten_after_every_operator(tmp_path):
    """A bench cut short (a device lease ending mid-run) keeps each finished operator: the --json
    file holds the document so far, `complete` false and the operators still to run named."""
    out = tmp_path / "bench.json"
    repo = load_repo(ROOT / "examples/kernels", only_ops=["rmsnorm", "silu_and_mul"])
    args = argparse.Namespace(json=out, compile_mode="default", resume=False)
    write = _partial_bench_writer(repo, ["eager"], args, _bench_keeper(repo, ["eager"], args))
    seen = []

    def record(reports):
        write(reports)
        if out.exists():
            seen.append(json.loads(out.read_text()))

    run_bench(repo, ["eager"], EvalOptions(device="cpu", trials=1), on_partial=record)
    assert [(d["complete"], d["not_evaluated"], [i["op"] for i in d["instances"]])
            for d in seen] == [(False, ["silu_and_mul"], ["rmsnorm"]),
                               (False, [], ["rmsnorm", "silu_and_mul"])]


# A reference that computes something else while torch.compile traces it: the compiled baseline
# is then wrong, which shows whether the judged (and timed) calls ran the compiled code.
COMPILE_PROBE_OP = {
    "reference.py": "import torch\n\n\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, x):\n"
                    "        if torch.compiler.is_compiling():\n"
                    "            return x * 2 + 1\n"
                    "        return x * 2\n",
    "input.py": UNAVAILABLE_OP["input.py"],
    "kernel.py": UNAVAILABLE_OP["kernel.py"],
    "shapes.json": json.dumps({"a": {"input_kwargs": {"n": 8}}}),
}


def test_the_compile_baseline_is_judged_as_compiled(tmp_path):
    """torch.compile runs eagerly under a dispatch mode, and a function whose first call ran
    under one is never compiled (torch 2.11 and 2.13): a baseline's calls run without the
    executor's dispatch recorder, so `compile` is the compiled reference, not eager again."""
    op = tmp_path / "probe"
    op.mkdir()
    for name, text in COMPILE_PROBE_OP.items():
        (op / name).write_text(text)
    repo = load_repo(tmp_path)
    reports = run_bench(repo, ["eager", "compile"], EvalOptions(device="cpu", trials=1),
                        compile_mode="default")
    assert reports["eager"].op("probe").status.value == "pass"
    compiled = reports["compile"].op("probe").shapes[0]
    assert compiled.status.value == "incorrect", compiled


def test_the_compile_baseline_keeps_inductors_cache_where_asked(tmp_path):
    """--compile-cache: the compile baseline's Inductor cache outlives the run (each executor's
    own TMPDIR would otherwise make every run compile and autotune afresh), and the document
    says where it is; without it the document says null."""
    cache = tmp_path / "inductor"
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "atrex", "bench", "examples/kernels", "--op", "rmsnorm",
         "--baselines", "compile", "--compile-mode", "default", "--device", "cpu",
         "--compile-cache", str(cache), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["compile_cache"] == str(cache.resolve())
    (instance,) = doc["instances"]
    assert all(s["status"] == "pass" for s in instance["results"]["compile"]["shapes"].values())
    assert any(path.is_file() for path in cache.rglob("*")), "Inductor wrote nothing there"


def test_a_time_that_holds_for_the_judges_draw_only_is_listed_under_the_table():
    """The sampling kernel on the H200 (results/h200-baac206): 583.8 us a call on the judge's
    draw, 58.1 on the same run's new values; eager agreed with itself."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "h200-baac206" / "sampling-bench"
                      / "h200-suite.json").read_text())
    shapes = doc["instances"][0]["results"]
    shapes["kb"]["shapes"]["decode-b64-v151936"]["timing_new_values_ms"] = 0.05808
    shapes["eager"]["shapes"]["decode-b64-v151936"]["timing_new_values_ms"] = 1.50237
    text = bench_markdown(doc)
    assert ("Times that depend on the input values (they hold for the judge's draw only):\n\n"
            "- `top_k_top_p_sampling` kb `decode-b64-v151936`: 583.8 µs a call on the timed "
            "draw, 58.1 µs on new values\n") in text
    assert "eager `decode-b64-v151936`" not in text


def test_the_header_names_the_calibrated_floors_a_launch_bound_row_is_read_against():
    """The H200's floors (results/h200-bdee65c): the read floors follow the launch floor where
    `atrex calibrate` measured them, and a calibration from before them gives the launch floor
    alone."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "h200-baac206" / "sampling-bench"
                      / "h200-suite.json").read_text())
    doc["device"].update(launch_floor_ms=0.000912, cold_read_floor_ms=0.000981,
                         dependent_read_floor_ms=0.001227)
    assert ("Launch floor: 0.91 µs per call; a kernel reading one cold line 0.98 µs, after an "
            "index read 1.23 µs.") in bench_markdown(doc)
    del doc["device"]["cold_read_floor_ms"], doc["device"]["dependent_read_floor_ms"]
    text = bench_markdown(doc)
    assert "Launch floor: 0.91 µs per call." in text and "cold line" not in text
