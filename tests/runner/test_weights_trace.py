"""`atrex weights` on a real trace: torch.profiler (record_shapes=True) records a small model on
the CPU in the test, and the command attributes its op time to the repository's operators."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from atrex.runner.repo import load_repo
from atrex.runner.trace import read_trace
from atrex.runner.weights import attribute, pick_shape
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parents[2]

RMSNORM_REFERENCE = '''import torch


class Model(torch.nn.Module):
    def forward(self, x, weight):
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, 1e-6)
'''
RMSNORM_INPUT = '''import torch


def _make_inputs(tokens, hidden):
    return {"x": torch.randn(tokens, hidden, device="cuda"),
            "weight": torch.randn(hidden, device="cuda")}
'''
LINEAR_REFERENCE = '''import torch


class Model(torch.nn.Module):
    def forward(self, x, weight, bias):
        return torch.nn.functional.linear(x, weight, bias)
'''
LINEAR_INPUT = '''import torch


def _make_inputs(m, n, k):
    return {"x": torch.randn(m, k), "weight": torch.randn(n, k), "bias": torch.randn(n)}
'''


def write_op(root: Path, name: str, reference: str, inputs: str, shapes: dict,
             metadata: dict | None = None) -> None:
    op = root / "ops" / name
    op.mkdir(parents=True)
    (op / "reference.py").write_text(reference)
    (op / "kernel.py").write_text(reference)
    (op / "input.py").write_text(inputs)
    (op / "shapes.json").write_text(json.dumps(shapes))
    if metadata is not None:
        (op / "metadata.json").write_text(json.dumps(metadata))


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), self.weight, 1e-6)


def make_trace(path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), RMSNorm(128), torch.nn.SiLU(),
                                torch.nn.Linear(128, 64))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, \
            torch.no_grad():
        for batch in (4, 8, 8):
            with record_function("decode_step"):
                model(torch.randn(batch, 64))
    prof.export_chrome_trace(str(path))


def make_repo(root: Path) -> None:
    write_op(root, "rmsnorm", RMSNORM_REFERENCE, RMSNORM_INPUT,
             {s: {"input_kwargs": {"tokens": t, "hidden": 128}}
              for s, t in (("t4", 4), ("t8", 8), ("t16", 16))})
    write_op(root, "linear", LINEAR_REFERENCE, LINEAR_INPUT,
             {"up": {"input_kwargs": {"m": 8, "n": 128, "k": 64}}},
             {"dtype": "fp32", "shapes": {"up": {"source_framework": "test"}}})
    (root / "atrex.toml").write_text(
        '[repo]\nops_root = "ops"\n\n[weights.map]\nrmsnorm = ["aten::rms_norm"]\n'
        'linear = ["aten::linear"]\n')


def test_weights_from_a_cpu_profiler_trace(tmp_path):
    trace_path = tmp_path / "trace.json"
    make_trace(trace_path)
    repo = tmp_path / "repo"
    make_repo(repo)
    summary_path = tmp_path / "weights.json"
    args = [sys.executable, "-m", "atrex", "weights", str(trace_path), "--map",
            str(repo / "atrex.toml"), "--json", str(summary_path)]
    dry = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "CPU op time (the trace has no GPU activity)" in dry.stdout
    assert '+      "call_count": 2,' in dry.stdout  # the diff, before anything is written
    assert "dry run" in dry.stdout
    assert not (repo / "ops" / "rmsnorm" / "metadata.json").exists()

    summary = json.loads(summary_path.read_text())
    assert summary["time_source"] == "cpu_ops"
    rms, linear = summary["ops"]["rmsnorm"], summary["ops"]["linear"]
    assert rms["calls"] == 3
    assert {k: v["calls"] for k, v in rms["shapes"].items()} == {"t4": 1, "t8": 2}
    # the first Linear at batch 8 is the shape `up`; at batch 4, and the second Linear, no shape
    assert linear["calls"] == 6 and linear["shapes"]["up"]["calls"] == 2
    assert linear["calls_matching_no_shape"] == 4
    assert 0 < summary["uncovered_share"] < 1  # SiLU, the input draws: not the repo's
    assert any(name == "aten::silu" for name, _ in summary["top_uncovered"])
    assert abs(rms["share"] + linear["share"] + summary["uncovered_share"] - 1) < 1e-4

    wrote = subprocess.run(args + ["--write"], capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    spec = load_repo(repo)
    weights = {s.id: s.weight for s in spec.op("rmsnorm").shapes}
    assert weights == {"t4": 1.0, "t8": 2.0, "t16": 0.0}
    assert spec.op("rmsnorm").importance == round(rms["share"], 6)
    meta = json.loads((repo / "ops" / "linear" / "metadata.json").read_text())
    assert meta["shapes"]["up"]["source_framework"] == "test"  # descriptive fields kept
    assert meta["shapes"]["up"]["call_count"] == 2 and meta["dtype"] == "fp32"


def test_an_annotation_takes_the_ops_inside_it(tmp_path):
    """Outermost match wins: a fused operator named by its annotation owns every op inside."""
    trace_path = tmp_path / "trace.json"
    make_trace(trace_path)
    trace = read_trace(trace_path)
    shapes = {"step": {"b8": [((8, 64), "float32")]}, "rmsnorm": {}}
    result = attribute(trace, {"step": ["decode_step"], "rmsnorm": ["aten::rms_norm"]}, shapes)
    assert result.ops["rmsnorm"].calls == 0
    assert result.ops["step"].calls == 3 and result.ops["step"].shapes["b8"].calls == 2


def test_shape_matching_ignores_size_one_axes_only_when_it_must():
    shapes = {"exact": [((1, 64, 4096), "bfloat16")], "flat": [((64, 4096), "bfloat16")]}
    assert pick_shape(shapes, [((1, 64, 4096), "bfloat16")]) == "exact"
    assert pick_shape({"flat": shapes["flat"]}, [((64, 1, 4096), "bfloat16")]) == "flat"
    assert pick_shape(shapes, [((64, 4096), "float32")]) is None  # dtype differs


def test_gpu_kernel_time_goes_to_the_op_that_launched_it(tmp_path):
    """The GPU layout of a torch.profiler trace (Kineto): kernels link to their op by External
    id, or by the correlation id of the runtime call that launched them. No GPU here, so the
    events are written out; kernel time, not host time, is what is attributed."""
    def op(name, ts, dur, ext, dims=()):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 7, "ts": ts,
                "dur": dur, "args": {"External id": ext, "Input Dims": [list(d) for d in dims],
                                     "Input type": ["c10::BFloat16"] * len(dims)}}

    def launch(ts, corr, ext):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 7, "ts": ts, "dur": 2, "args": {"correlation": corr, "External id": ext}}

    def kernel(name, ts, dur, corr, ext=None):
        args = {"correlation": corr, **({"External id": ext} if ext is not None else {})}
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 3, "ts": ts,
                "dur": dur, "args": args}

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "decode", "pid": 1, "tid": 7, "ts": 0,
         "dur": 1000},
        op("aten::rms_norm", 10, 50, 1, [(64, 4096), (4096,)]), launch(20, 100, 1),
        op("aten::linear", 100, 80, 2, [(64, 4096), (6144, 4096)]),
        op("aten::mm", 110, 60, 3, [(64, 4096), (4096, 6144)]), launch(120, 101, 3),
        op("aten::silu", 300, 30, 4, [(64, 14336)]), launch(305, 102, 4),
        kernel("rms_norm_kernel", 500, 5.0, 100, ext=1),
        kernel("nvjet_gemm_64x128", 510, 30.0, 101),  # linked through the runtime call only
        kernel("silu_kernel", 545, 4.0, 102, ext=4),
    ]
    path = tmp_path / "gpu_trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_trace(path)
    assert trace.has_device_time
    shapes = {"rmsnorm": {"t64": [((64, 4096), "bfloat16"), ((4096,), "bfloat16")]},
              "gemm": {"qkv": [((64, 4096), "bfloat16"), ((6144, 4096), "bfloat16")]}}
    result = attribute(trace, {"rmsnorm": ["aten::rms_norm"], "gemm": ["aten::linear"]}, shapes)
    assert result.source == "gpu_kernels" and result.total_us == 39.0
    assert result.ops["gemm"].shapes["qkv"].calls == 1
    assert result.ops["gemm"].time_us == 30.0  # the kernel's time, not the op's 80 us on the host
    assert result.ops["rmsnorm"].shapes["t64"].time_us == 5.0
    assert result.unmatched == {"silu_kernel": 4.0}
    assert abs(result.uncovered_share - 4.0 / 39.0) < 1e-9


@pytest.mark.slow
def test_the_h200_weights_script_runs_on_a_cpu_with_a_tiny_llama(tmp_path):
    """benchmarks/weights_h200.sh end to end, DEVICE=cpu TINY=1: a transformers Llama with random
    weights, a profiled decode, `atrex weights` into a copy of benchmarks/suite."""
    pytest.importorskip("transformers")
    suite = ROOT / "benchmarks" / "suite"
    suite_before = {p: p.read_text() for p in suite.glob("*/metadata.json")}
    env = {**os.environ, "DEVICE": "cpu", "TINY": "1", "BATCH": "2", "PROMPT": "8", "STEPS": "2",
           "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "weights_h200.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "out" / "weights.json").read_text())
    assert summary["time_source"] == "cpu_ops"
    for op in ("gemm_decode", "paged_decode_gqa", "fused_add_rmsnorm", "rope", "silu_and_mul",
               "kv_cache_append", "top_k_top_p_sampling"):
        assert summary["ops"][op]["calls"] > 0, op
    written = json.loads((tmp_path / "out" / "metadata" / "gemm_decode.json").read_text())
    assert written["importance_score"] == summary["ops"]["gemm_decode"]["share"]
    assert suite_before == {p: p.read_text() for p in suite.glob("*/metadata.json")}
