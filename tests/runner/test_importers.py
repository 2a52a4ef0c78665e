"""`atrex import kernelbench` and `atrex import flashinfer-bench` on problems written in their
formats for these tests (tests/runner/fixtures/), then `atrex check` on what they wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from atrex.runner.repo import load_repo

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "runner" / "fixtures"
KB = FIXTURES / "kernelbench"
FIB = FIXTURES / "flashinfer"

TORCH_RMSNORM = '''import torch


class Model(torch.nn.Module):
    def forward(self, hidden_states, weight, eps):
        x = hidden_states.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return (x * weight.float()).to(hidden_states.dtype)
'''


def atrex(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atrex", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


@pytest.mark.slow
def test_kernelbench_problems_import_and_run(tmp_path):
    out = tmp_path / "kb"
    result = atrex("import", "kernelbench", str(KB / "level1"), str(KB / "level2"),
                   "--candidates", str(KB / "generations"), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "imported 2 of 2" in result.stdout

    shapes = json.loads((out / "level1_3_Scale_Add" / "shapes.json").read_text())
    assert shapes["kernelbench"]["input_kwargs"] == {"batch_size": 4096, "dim": 65536}
    assert shapes["kernelbench"]["targets"] == ["cuda"]
    cpu = shapes["cpu"]
    assert cpu["targets"] == ["cpu"] and cpu["init_kwargs"] == {"alpha": 0.5}
    assert 2 * 4 * cpu["input_kwargs"]["batch_size"] * cpu["input_kwargs"]["dim"] <= 1 << 20
    linear = json.loads((out / "level2_5_Linear_ReLU" / "shapes.json").read_text())
    # out_features = in_features // 2 in the problem: derived sizes follow the scaled ones
    assert linear["kernelbench"]["init_kwargs"] == {"in_features": 8192, "out_features": 4096}
    small = linear["cpu"]
    assert small["init_kwargs"]["out_features"] == small["input_kwargs"]["in_features"] // 2
    assert (out / "level1_3_Scale_Add" / "kernel.py").is_file()  # the ModelNew candidate
    assert not (out / "level2_5_Linear_ReLU" / "kernel.py").exists()
    assert "no candidate: add kernel.py" in result.stdout
    assert "[tolerances.float32]" in (out / "atrex.toml").read_text()

    report_path = tmp_path / "report.json"
    check = atrex("check", str(out), "--device", "cpu", "--json", str(report_path), "--quiet")
    report = {op["name"]: op for op in json.loads(report_path.read_text())["ops"]}
    assert check.returncode == 2, check.stdout + check.stderr  # the op without a candidate
    scale_add = report["level1_3_Scale_Add"]
    assert scale_add["status"] == "pass", scale_add
    assert [s["id"] for s in scale_add["shapes"]] == ["cpu"]
    assert scale_add["own_kernel_share"] == 1.0
    assert "not kernel.py" in report["level2_5_Linear_ReLU"]["format_error"]["message"]


@pytest.mark.slow
def test_flashinfer_definitions_import_and_run(tmp_path):
    out = tmp_path / "fib"
    result = atrex("import", "flashinfer-bench", str(FIB / "definitions"), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr

    rms = json.loads((out / "rmsnorm_h4096" / "shapes.json").read_text())
    # four workloads, two of them identical; the smallest one (batch 1) fits a CPU run as it is
    assert {k: (v["input_kwargs"], v["targets"]) for k, v in rms.items()} == {
        "w0": ({"hidden_size": 4096, "batch_size": 8192, "eps": 1e-6}, ["cuda"]),
        "w1": ({"hidden_size": 4096, "batch_size": 64, "eps": 1e-6}, ["cuda"]),
        "w2": ({"hidden_size": 4096, "batch_size": 1, "eps": 1e-5}, ["cpu", "cuda"])}
    gemm = json.loads((out / "gemm_n2048_k1024" / "shapes.json").read_text())
    assert gemm["w0"]["input_kwargs"] == {"N": 2048, "K": 1024, "M": 4096}
    cpu = gemm["cpu"]["input_kwargs"]
    assert cpu["M"] == 64 and 2 * (cpu["M"] + cpu["N"]) * cpu["K"] <= 1 << 20
    assert cpu["K"] % 16 == 0  # the definition's constraint holds
    assert "inputs ['B'] come from safetensors files" in result.stdout
    metadata = json.loads((out / "gemm_n2048_k1024" / "metadata.json").read_text())
    assert metadata["op_type"] == "gemm" and metadata["dtype"] == "fp16"

    (out / "rmsnorm_h4096" / "kernel.py").write_text(TORCH_RMSNORM)
    (out / "gemm_n2048_k1024" / "kernel.py").write_text(
        (out / "gemm_n2048_k1024" / "reference.py").read_text())
    repo = load_repo(out)
    assert repo.op("rmsnorm_h4096").forward_params == ["hidden_states", "weight", "eps"]
    report_path = tmp_path / "report.json"
    check = atrex("check", str(out), "--device", "cpu", "--json", str(report_path), "--quiet")
    report = {op["name"]: op for op in json.loads(report_path.read_text())["ops"]}
    assert check.returncode == 1, check.stdout + check.stderr  # torch candidates: fallbacks
    for name, op in report.items():
        assert op["status"] == "fallback", (name, op)  # correct on every call, not own kernels
        assert [s["id"] for s in op["shapes"]] == (["w2"] if name == "rmsnorm_h4096"
                                                   else ["cpu"])


def test_a_source_that_cannot_be_imported_is_listed_and_the_others_written(tmp_path):
    broken = tmp_path / "defs" / "broken.json"
    broken.parent.mkdir()
    definition = json.loads((FIB / "definitions" / "gemm" / "gemm_n2048_k1024.json").read_text())
    definition["inputs"]["A"]["dtype"] = "float7"
    broken.write_text(json.dumps(definition))
    result = atrex("import", "flashinfer-bench", str(broken), "--out", str(tmp_path / "out"),
                   "--workloads", str(FIB / "workloads"))
    assert result.returncode == 2
    assert "inputs.A.dtype: 'float7' is not one of" in result.stderr
    assert "imported 0 of 1" in result.stdout
