"""The launch-configuration sweeps (benchmarks/*_h200.py over benchmarks/launch_sweep.py) on the
CPU: every variant of the swept kernels' last two grid rounds (what a device call runs, with
`--grids-from -2`; the interpreter-visible constants) is correct under the interpreter at the
CPU shapes, so a GPU run only has to time them; and the sweeps committed from the H200
summarize into one row per shape. Older rounds were timed when they were new; re-checking all of
them took 760 s of a full test run on 2 cores (13 sampling variants at ~24 s each)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# sweep script -> the results folder its H200 runs are committed under (None: not yet run)
SWEEPS = {"small_ops_h200": "h200-small-ops", "attention_h200": "h200-attention",
          "gemm_h200": "h200-gemm"}
CHECKED_ROUNDS = 2


def _module(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_every_swept_variant_is_correct_on_the_cpu(name, tmp_path):
    out = tmp_path / "sweep.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), str(out),
                          "--device", "cpu", "--grids-from", str(-CHECKED_ROUNDS)],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(out.read_text())
    sweep, launch = _module(name), _module("launch_sweep")
    assert doc["complete"] is True and set(doc["ops"]) == set(sweep.PLAN.grids)
    for op, result in doc["ops"].items():
        assert result["shapes"], op
        last = launch.rounds_from(sweep.PLAN, -CHECKED_ROUNDS, [op])
        expected = launch.variants(last, op, quick=False, device="cpu")
        for row in result["shapes"]:
            assert [e["constants"] for e in row["variants"]] == expected, op
            for entry in row["variants"]:
                assert entry["mismatch"] is None and "error" not in entry, (op, entry)


@pytest.mark.parametrize("name", sorted(n for n, folder in SWEEPS.items() if folder))
def test_the_committed_sweeps_summarize_into_one_row_per_shape(name):
    results = sorted((ROOT / "benchmarks" / "results" / SWEEPS[name]).glob("sweep-*/*.json"))
    assert results, "no committed sweep results"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--summarize",
                          *map(str, results)], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == sum(len(op["shapes"]) for path in results
                            for op in json.loads(path.read_text())["ops"].values())
    assert all("H200" in json.loads(p.read_text())["environment"]["gpu"] for p in results)


def test_the_device_script_runs_a_sweep_without_a_gpu(tmp_path):
    """benchmarks/sweep_h200.sh, as a device call runs it, with DEVICE=cpu and no ncu."""
    env = {"PATH": "/usr/bin:/bin", "DEVICE": "cpu", "NCU": "0", "OUT": str(tmp_path),
           "SCRIPT": "benchmarks/gemm_h200.py", "OPS": "gemm_prefill", "PYTHON": sys.executable,
           "SWEEP_ARGS": "--grids-from -1"}
    run = subprocess.run(["bash", "benchmarks/sweep_h200.sh"], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr
    assert "sweep rc 0" in (tmp_path / "sweep.log").read_text()
    doc = json.loads((tmp_path / "gemm-sweep.json").read_text())
    assert doc["complete"] is True and list(doc["ops"]) == ["gemm_prefill"]


def test_the_device_script_profiles_each_contestant_and_summarizes(tmp_path):
    """NCU=1 with NCU_CONTESTANTS: one ncu run per operator and contestant, named apart, and
    ncu-summary.md over them. Nsight Compute is absent on a CPU machine, so a stand-in on PATH
    records its command line and replays a profile committed from the H200."""
    profile = ROOT / "benchmarks/results/h200-attention/bench-893c4d2/ncu-paged_decode_gqa.csv"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "ncu"
    stand_in.write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/ncu-calls.txt\ncat {profile}\n')
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SWEEP": "0", "NCU": "1", "OUT": str(out),
           "OPS": "paged_decode_gqa", "NCU_CONTESTANTS": "kb eager", "PYTHON": sys.executable}
    run = subprocess.run(["bash", "benchmarks/sweep_h200.sh"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr
    calls = (tmp_path / "ncu-calls.txt").read_text().splitlines()
    assert [c.split("--profile-contestant ")[1] for c in calls] == ["kb", "eager"]
    assert all("--ops paged_decode_gqa --profile-once" in c for c in calls)
    assert {p.name for p in out.glob("ncu-*.csv")} == {"ncu-paged_decode_gqa.csv",
                                                        "ncu-paged_decode_gqa-eager.csv"}
    summary = (out / "ncu-summary.md").read_text()
    assert summary.count("_paged_decode_split_kernel") == 2
    assert "ncu summary rc 0" in (out / "sweep.log").read_text()


def test_the_summary_finds_the_variant_that_runs_the_committed_constants():
    sweep = _module("launch_sweep")
    committed = {"SCHEDULE": "splits", "BLOCK_N": 64, "NUM_STAGES": 2, "TMA_PAGES": False}
    variants = [{"constants": {"BLOCK_N": 32, "NUM_STAGES": 2}, "events_us": 1.0},
                {"constants": {"SCHEDULE": "balanced", "BLOCK_N": 64}, "events_us": 2.0},
                {"constants": {"BLOCK_N": 64, "NUM_STAGES": 2}, "events_us": 3.0}]
    assert sweep.committed_variant(variants, committed) is variants[2]
    assert sweep.committed_variant(variants, None) is None  # sweeps from before it was recorded


def test_a_sweep_holds_a_variant_to_the_suites_tolerance_for_its_operator():
    """The FP8 MoE's re-quantized intermediate may move an output by an FP8 step (the suite's
    atrex.toml allows atol 0.1 for it): the H200 sweep of 3fd0026 called every FP8 MoE variant,
    the committed one too, a mismatch at 0.039 off. A plain bf16 operator stays held to 2e-2."""
    import torch

    sweep = _module("launch_sweep")
    want = torch.linspace(-2, 2, 4096).reshape(64, 64).bfloat16()
    one_step_off = want.float().clone()
    one_step_off[0, :8] += 0.039
    assert sweep.mismatch("fp8_fused_moe", [one_step_off.bfloat16()], [want]) is None
    assert sweep.mismatch("fused_moe", [(want.float() + 0.05).bfloat16()], [want])
    assert sweep.mismatch("fp8_fused_moe", [(want.float() + 0.05).bfloat16()], [want])


def test_a_retime_plan_confirms_earlier_winners_as_they_ran_then():
    """--retime: the committed constants, then each shape's fastest variants of an earlier sweep,
    completed with the values the file held at that sweep; a variant of a constant the kernel
    has dropped, and a sweep that did not record its file's values, contribute nothing."""
    from types import SimpleNamespace

    sweep = _module("launch_sweep")
    grids = [{"BLOCK": [32, 64], "STAGES": [3, 4]}, {"PAIR": [False, True]}]
    plan = sweep.Plan(grids={"op": grids})
    kernel = SimpleNamespace(BLOCK=64, STAGES=4, PAIR=True)

    def shape(*timed):
        return {"variants": [{"constants": c, "events_us": t} for c, t in timed]
                + [{"constants": {"BLOCK": 16}, "mismatch": "off by 1"}]}

    then = {"ops": {"op": {"committed": {"BLOCK": 32, "STAGES": 3, "PAIR": False, "GONE": 1},
                           "shapes": [shape(({"BLOCK": 64}, 2.0), ({"GONE": 2}, 1.0),
                                            ({"STAGES": 4}, 3.0), ({"BLOCK": 128}, 9.0))]}}}
    unrecorded = {"ops": {"op": {"shapes": [shape(({"BLOCK": 256}, 0.5))]}}}
    retimed = sweep.plan_from_results(plan, [then, unrecorded], 3, {"op": kernel})
    assert sweep.variants(retimed, "op", quick=False) == [
        {"BLOCK": 64, "STAGES": 4, "PAIR": True},
        {"BLOCK": 64, "STAGES": 3, "PAIR": False},
        {"BLOCK": 32, "STAGES": 4, "PAIR": False},
    ]


def test_grids_from_runs_only_the_latest_rounds(tmp_path):
    """--grids-from -1: only each operator's last grid (a new round, without re-timing the old)."""
    gemm = _module("gemm_h200")
    sweep = _module("launch_sweep")
    out = tmp_path / "sweep.json"
    # its own process: a CPU sweep sets TRITON_INTERPRET and maps CUDA to the CPU for good
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gemm_h200.py"), str(out),
                          "--device", "cpu", "--ops", "gemm_decode", "--grids-from", "-1"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    last = sweep.rounds_from(gemm.PLAN, -1, ["gemm_decode"])
    want = sweep.variants(last, "gemm_decode", quick=False, device="cpu")
    for row in json.loads(out.read_text())["ops"]["gemm_decode"]["shapes"]:
        assert [v["constants"] for v in row["variants"]] == want
        assert all(v["mismatch"] is None for v in row["variants"])


FAILING_DRAW = r"""
import sys
sys.path.insert(0, "benchmarks")
import launch_sweep, small_ops_h200

draw = launch_sweep.Op.draw
def failing(self, shape):
    if shape["input_kwargs"].get("hidden_size") == 320:  # fused_add_rmsnorm cpu-small
        raise RuntimeError("Offset increment outside graph capture encountered unexpectedly.")
    return draw(self, shape)
launch_sweep.Op.draw = failing
sys.exit(launch_sweep.main(small_ops_h200.PLAN, "sweep", [sys.argv[1], "--device", "cpu",
                           "--ops", "fused_add_rmsnorm,silu_and_mul", "--grids-from", "-1",
                           "--quick"]))
"""


def test_a_shape_that_fails_is_recorded_and_the_sweep_goes_on(tmp_path):
    """A shape whose inputs cannot be drawn (on an H100, a poisoned CUDA generator did this, and
    the whole sweep died) becomes a row with its error; the other shapes and operators are
    swept, the summary says which shape failed, and the run exits 1."""
    out = tmp_path / "sweep.json"
    run = subprocess.run([sys.executable, "-c", FAILING_DRAW, str(out)], capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 1, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    rows = {r["shape"]: r for r in doc["ops"]["fused_add_rmsnorm"]["shapes"]}
    assert rows["cpu-small"]["error"].startswith("RuntimeError: Offset increment")
    assert rows["cpu-rows"]["variants"]
    assert all(r["variants"] for r in doc["ops"]["silu_and_mul"]["shapes"])
    assert doc["complete"] is True
    summary = _module("launch_sweep").summarize([out])
    assert "| fused_add_rmsnorm | cpu-small | " in summary and "the shape failed" in summary


def _profile_once(op_script: str, op: str, contestant: str, *more: str
                  ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / op_script), "unused",
                           "--device", "cpu", "--ops", op, "--profile-once",
                           "--profile-contestant", contestant, *more],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_profile_once_calls_the_contestant_ncu_is_asked_to_profile():
    """NCU_CONTESTANTS in sweep_h200.sh: the library peer's (or the reference's) call is what
    runs in the profiler's range, once per shape, so its kernels sit beside ours."""
    run = _profile_once("gemm_h200.py", "gemm_decode", "library")
    assert run.returncode == 0, run.stderr[-2000:]
    shapes = json.loads((ROOT / "benchmarks/suite/gemm_decode/shapes.json").read_text())
    cpu = [sid for sid, s in shapes.items() if "cpu" in s["targets"]]
    assert run.stdout.split("\n")[:-1] == [f"profiled gemm_decode {sid} (library)" for sid in cpu]


def test_profile_once_compiles_the_reference_before_the_profiled_call():
    run = _profile_once("small_ops_h200.py", "fused_add_rmsnorm", "compile", "--shape", "cpu-rows")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:-1] == ["profiled fused_add_rmsnorm cpu-rows (compile)"]


def test_profile_once_refuses_a_library_peer_the_operator_lacks():
    run = _profile_once("small_ops_h200.py", "kv_cache_append", "library")
    assert run.returncode == 2
    assert "kv_cache_append has no library peer" in run.stderr


def test_the_summary_shows_the_spread_over_draws_of_a_data_dependent_kernel():
    sweep = _module("launch_sweep")
    text = sweep.summarize([ROOT / "benchmarks" / "results" / "h100-812c680" / "sampling"
                            / "small_ops-sweep.json"])
    assert "58.89 / 55.41 (draws 57.18-60.05)" in text


def test_stress_shapes_are_swept_on_the_gpu_and_never_benched():
    """A sweep's stress shapes (inputs that take a data-dependent kernel down a rare path) join
    its GPU shapes; the suite's own shapes.json, which `atrex bench` reads, does not have them."""
    sweep, launch = _module("small_ops_h200"), _module("launch_sweep")
    op = "top_k_top_p_sampling"
    stress = set(sweep.PLAN.stress_shapes[op])
    assert stress and stress <= set(launch.shapes_of(op, "cuda", sweep.PLAN))
    assert not stress & set(launch.shapes_of(op, "cuda"))
    assert not stress & set(launch.shapes_of(op, "cpu", sweep.PLAN))
    suite = json.loads((ROOT / "benchmarks" / "suite" / op / "shapes.json").read_text())
    assert not stress & set(suite)


def _fake_h100(tmp_path, name: str = "NVIDIA H100 80GB HBM3") -> tuple[Path, Path]:
    """A bin folder whose nvidia-smi answers as that card (to any query), and an empty $OUT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f'#!/bin/bash\necho "{name}"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    return bin_dir, out


def test_the_dispatching_device_call_benches_the_ops_on_a_card_other_than_the_h200(tmp_path):
    """benchmarks/suite_or_sampling_sweep.sh on an H100 (nvidia-smi stands in, `atrex bench`
    runs on the CPU): one bench of SUITE_OPS, packed with the commit and versions."""
    bin_dir, out = _fake_h100(tmp_path)
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(out),
           "ATREX_COMMIT": "0" * 40, "PYTHON": sys.executable, "SUITE_OPS": "silu_and_mul",
           "BENCH_BASELINES": "eager,kb", "HOME": str(tmp_path),
           "BENCH_WORK": str(tmp_path / "work")}
    run = subprocess.run(["bash", "benchmarks/suite_or_sampling_sweep.sh"], capture_output=True,
                         text=True, timeout=900, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr
    assert "bench rc 0" in run.stdout
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(["tar", "xzf", str(out / "bench.tgz"), "-C", str(unpacked)], check=True)
    assert (unpacked / "commit.txt").read_text().strip() == "0" * 40
    doc = json.loads((unpacked / "bench.json").read_text())
    assert doc["complete"] and [i["op"] for i in doc["instances"]] == ["silu_and_mul"]


def test_the_dispatching_device_call_profiles_then_benches_on_the_h200(tmp_path):
    """On an H200 (nvidia-smi stands in; the sequence runs on the CPU, where ncu is missing):
    SWEEP_FIRST's sweep runs, NCU_FIRST's profiles are attempted and logged, and the suite rows
    start; a first call under CALL_S packs what exists, and a second call resumes the sequence
    and runs it to the end."""
    bin_dir, out = _fake_h100(tmp_path, "NVIDIA H200")
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(out),
           "ATREX_COMMIT": "0" * 40, "PYTHON": sys.executable, "DEVICE": "cpu",
           "HOME": str(tmp_path), "WORK": str(tmp_path / "work"), "WAIT_S": "600",
           "NCU_FIRST": "small_ops:silu_and_mul:compile", "SUITE_OPS": "silu_and_mul",
           "SUITE_BASELINES": "eager,kb", "SWEEP_FIRST": "small_ops:kv_cache_append:-1",
           "SWEEP_S": "60", "NCU_S": "20", "CALL_S": "140"}
    first = subprocess.run(["bash", "benchmarks/suite_or_sampling_sweep.sh"],
                           capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert first.returncode == 0, first.stderr
    assert (out / "suite-h200.tgz").exists(), first.stdout
    env.pop("CALL_S")
    run = subprocess.run(["bash", "benchmarks/suite_or_sampling_sweep.sh"], capture_output=True,
                         text=True, timeout=900, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr
    assert "sequence finished" in run.stdout and "rc.bench: 0" in run.stdout, run.stdout
    assert "ncu silu_and_mul rc" in (out / "ncu-silu_and_mul" / "sweep.log").read_text()
    swept = json.loads((out / "sweep-kv_cache_append" / "small_ops-sweep.json").read_text())
    assert swept["complete"] and [v["constants"] for r in swept["ops"]["kv_cache_append"]["shapes"]
                                  for v in r["variants"]][0]["TILE_TOKENS"] == 4


def test_the_dispatching_device_call_sweeps_sampling_when_forced(tmp_path):
    """FORCE_SWEEP=1 on an H100 (nvidia-smi stands in, the sweep runs on the CPU): the sampling
    sweep's newest round, packed with the commit and versions."""
    bin_dir, out = _fake_h100(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DEVICE": "cpu", "NCU_TOO": "0", "OUT": str(out),
           "GRIDS_FROM": "-1", "ATREX_COMMIT": "0" * 40, "PYTHON": sys.executable,
           "FORCE_SWEEP": "1"}
    run = subprocess.run(["bash", "benchmarks/suite_or_sampling_sweep.sh"], capture_output=True,
                         text=True, timeout=900, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr
    assert "GPU: NVIDIA H100 80GB HBM3" in run.stdout and "sweep rc 0" in run.stdout
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(["tar", "xzf", str(out / "callF.tgz"), "-C", str(unpacked)], check=True)
    assert (unpacked / "commit.txt").read_text().strip() == "0" * 40
    doc = json.loads((unpacked / "small_ops-sweep.json").read_text())
    assert doc["complete"] is True and list(doc["ops"]) == ["top_k_top_p_sampling"]
