"""Repositories as teams have them (issue 17): Atrex-Bench's format unchanged, one malformed
operator never sinking the run, partial directories reported, a CPU run that skips what does
not fit, finished results kept when the run is interrupted."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from atrex.runner.config import load_config
from atrex.runner.errors import FormatError
from atrex.runner.repo import load_repo

from tests.runner.atrexbench_fixtures import write_e8m0_scale, write_fp8_quant, write_qkv_rope

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "tests" / "adversarial" / "ops" / "rmsnorm"


def atrex(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atrex", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600, **kwargs)


def reference_as_kernel(op: Path) -> None:
    """The reference itself as the candidate: correct by construction, and a fallback."""
    shutil.copy(op / "reference.py", op / "kernel.py")


# --- Atrex-Bench's format, read without running anything -----------------------------------------

def test_atrex_bench_metadata_and_optional_forward_parameters_load(tmp_path):
    reference_as_kernel(write_qkv_rope(tmp_path))
    reference_as_kernel(write_fp8_quant(tmp_path))
    repo = load_repo(tmp_path)
    qkv = repo.op("fused_qkv_rope")
    assert qkv.forward_params == ["qkv", "positions", "qkv_bias"]
    assert qkv.forward_required == ["qkv", "positions"]
    assert [s.weight for s in qkv.shapes] == [12.0, 4.0]  # call_count; total_duration_us null
    assert qkv.weight_source == "trace"
    assert repo.op("fp8_quant").dtype == "fp8_e4m3"


def test_near_miss_of_a_field_atrex_reads_is_still_refused(tmp_path):
    op = write_fp8_quant(tmp_path)
    reference_as_kernel(op)
    meta = json.loads((op / "metadata.json").read_text())
    meta["shapes"]["0"]["call_cout"] = 3
    (op / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(FormatError, match="shapes.0.call_cout: unknown field; did you mean "
                       "'call_count'"):
        load_repo(tmp_path)


def test_every_torch_dtype_is_usable_in_tolerances(tmp_path):
    (tmp_path / "atrex.toml").write_text(
        "[tolerances.float8_e4m3fnuz]\natol = 0.05\n"
        "[tolerances.float8_e8m0fnu]\natol = 0.0\nrtol = 1.0\nrel_l2 = 1.0\n"
        "[ops.quant.tolerances.float8_e5m2fnuz]\nrtol = 0.3\n")
    config = load_config(tmp_path)
    assert config.tolerance("any", "float8_e4m3fnuz").atol == 0.05
    assert config.tolerance("any", "float8_e4m3fnuz").rtol == 0.13  # the fnuz default kept
    assert config.tolerance("any", "float8_e8m0fnu").rtol == 1.0
    assert config.tolerance("quant", "float8_e5m2fnuz").rtol == 0.3
    (tmp_path / "atrex.toml").write_text("[tolerances.float8_e4m3fnuzz]\natol = 0.05\n")
    with pytest.raises(FormatError, match="tolerances.float8_e4m3fnuzz: unknown dtype"):
        load_config(tmp_path)


# --- one run, every problem listed ----------------------------------------------------------------

@pytest.mark.slow
def test_each_malformed_operator_is_its_own_format_error_and_the_rest_runs(tmp_path):
    repo = tmp_path / "kernels"
    qkv = write_qkv_rope(repo)
    shapes = json.loads((qkv / "shapes.json").read_text())
    # 65536 tokens: about 8 MiB of bf16 inputs, 32 MiB more in float64 for the reference
    shapes["2"] = {"init_kwargs": {"num_heads": 2, "head_dim": 16},
                   "input_kwargs": {"tokens": 65536, "num_heads": 2, "head_dim": 16}}
    (qkv / "shapes.json").write_text(json.dumps(shapes))
    reference_as_kernel(qkv)
    reference_as_kernel(write_fp8_quant(repo))
    reference_as_kernel(write_e8m0_scale(repo))
    broken = write_fp8_quant(repo, name="broken_metadata")
    reference_as_kernel(broken)
    meta = json.loads((broken / "metadata.json").read_text())
    meta["shapes"]["0"]["call_cout"] = 3
    (broken / "metadata.json").write_text(json.dumps(meta))
    partial = repo / "partial_op"
    partial.mkdir()
    shutil.copy(qkv / "reference.py", partial / "reference.py")
    shutil.copy(qkv / "shapes.json", partial / "shapes.json")

    report_path = tmp_path / "report.json"
    result = atrex("check", str(repo), "--device", "cpu", "--json", str(report_path),
                   "--memory-budget", "0.01", "--trials", "1")
    assert result.returncode == 2, result.stdout + result.stderr
    report = json.loads(report_path.read_text())
    ops = {op["name"]: op for op in report["ops"]}
    assert sorted(ops) == ["broken_metadata", "e8m0_scale", "fp8_quant", "fused_qkv_rope",
                           "partial_op"]

    # Atrex-Bench's operators ran: correct (a fallback, the reference being the candidate),
    # float8_e4m3fnuz outputs compared with the fnuz tolerance, qkv_bias left to its default
    assert ops["fp8_quant"]["status"] == "fallback", ops["fp8_quant"]
    statuses = {s["id"]: s["status"] for s in ops["fused_qkv_rope"]["shapes"]}
    assert statuses == {"0": "fallback", "1": "fallback", "2": "skipped"}
    skipped = ops["fused_qkv_rope"]["shapes"][2]["message"]
    assert "over the CPU memory budget of 0.01 GiB" in skipped
    assert "fused_qkv_rope / 2: skipped: needs about" in result.stdout  # under the table
    assert "e8m0_scale: format_error: no tolerance for float8_e8m0fnu" in result.stdout
    assert "2 fallback, 3 format_error" in result.stdout  # the verdict line

    issue = ops["e8m0_scale"]["format_error"]
    assert ops["e8m0_scale"]["status"] == "format_error"
    assert issue["file"] == str(repo / "atrex.toml")
    assert issue["field"] == "tolerances.float8_e8m0fnu"
    assert "set [tolerances.float8_e8m0fnu]" in issue["message"]

    issue = ops["broken_metadata"]["format_error"]
    assert issue["file"].endswith("broken_metadata/metadata.json")
    assert issue["field"] == "shapes.0.call_cout"
    issue = ops["partial_op"]["format_error"]
    assert "has reference.py, shapes.json but not input.py, kernel.py" in issue["message"]
    for name in ("e8m0_scale", "broken_metadata", "partial_op"):
        assert f"atrex: error: operator {name}: " in result.stderr


def _ctrl_c_default() -> None:
    """A shell starts background jobs with SIGINT ignored, and Python then never raises
    KeyboardInterrupt: the child gets the disposition an interactive terminal gives it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_interrupted_run_keeps_the_finished_operators(tmp_path):
    repo = tmp_path / "kernels"
    shutil.copytree(RMSNORM, repo / "a_rmsnorm")
    shapes = json.loads((repo / "a_rmsnorm" / "shapes.json").read_text())
    shapes["cpu-big"] = {**shapes["cpu"], "input_kwargs": {"token_count": 64, "hidden_size": 512}}
    (repo / "a_rmsnorm" / "shapes.json").write_text(json.dumps(shapes))
    shutil.copytree(RMSNORM, repo / "b_hangs")
    kernel = repo / "b_hangs" / "kernel.py"
    kernel.write_text(kernel.read_text().replace(
        "        return rmsnorm(x, weight, self.eps)",
        "        import time\n        time.sleep(600)\n"
        "        return rmsnorm(x, weight, self.eps)"))
    report_path = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "atrex", "check", str(repo), "--device",
                             "cpu", "--json", str(report_path), "--max-shapes", "1", "--quiet",
                             "--timeout-s", "500"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_default)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if report_path.exists() and "a_rmsnorm" in report_path.read_text():
                break
            time.sleep(0.5)
        time.sleep(2)  # b_hangs is loading or stuck in its sleep
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    report = json.loads(report_path.read_text())
    assert [op["name"] for op in report["ops"]] == ["a_rmsnorm"]
    assert [s["id"] for s in report["ops"][0]["shapes"]] == ["cpu"]  # the smaller by bytes
    assert report["ops"][0]["status"] == "pass"
    assert any("interrupted (KeyboardInterrupt); not evaluated: b_hangs" in n
               for n in report["notes"])
    assert "--max-shapes" in " ".join(report["notes"])
