"""Pure parts of the agent: the acceptance rule, dropout, bottleneck classes, ncu parsing, reply
extraction, op ranking and the [agent] table."""

from __future__ import annotations

import random

import pytest
from atrex.agent.api import rank_ops_by_stake
from atrex.agent.config import agent_table
from atrex.agent.decision import AcceptanceRule, decide
from atrex.agent.measure import Measurement, ShapeNumbers
from atrex.agent.memory import AttemptMemory, MemoryItem
from atrex.agent.ncu import STALL_METRIC, own_kernel_names, parse_csv, summarize
from atrex.agent.profiling import classify_from_ncu, classify_from_runner
from atrex.agent.proposers import parse_proposers
from atrex.agent.proposers.extract import extract_module
from atrex.runner.errors import FormatError
from atrex.runner.model import DeviceInfo, OpResult, Report, Status


def shape(id="s", time_ms=1.0, rse=0.005, sol_ms=0.1, weight=1.0, status="pass",
          bound="memory"):
    return ShapeNumbers(id=id, status=status, weight=weight, time_ms=time_ms, sol_ms=sol_ms,
                        timing_rse=rse, timing_reps=100,
                        roofline_fraction=None if time_ms is None else sol_ms / time_ms,
                        own_kernel_share=1.0, bound=bound, timing_method="cuda_events",
                        message=None)


def measured(*shapes, status="pass") -> Measurement:
    return Measurement(status=status, own_kernel_share=1.0, shapes=list(shapes),
                       timing_source="runner")


# -- acceptance rule ------------------------------------------------------------------------------
def test_weighted_time_rse_and_fraction():
    m = measured(shape("a", 1.0, 0.01, 0.5, weight=3), shape("b", 2.0, 0.02, 0.2, weight=1))
    assert m.weighted_time_ms == pytest.approx(5.0)
    assert m.weighted_rse == pytest.approx(((3 * 0.01) ** 2 + (2 * 0.02) ** 2) ** 0.5 / 5)
    assert m.roofline_fraction == pytest.approx((1.5 + 0.2) / 5)


def test_significant_gain_is_accepted_noise_is_not():
    incumbent = measured(shape(time_ms=1.0, rse=0.005))
    assert decide(measured(shape(time_ms=0.9, rse=0.005)), incumbent).accepted
    small = decide(measured(shape(time_ms=0.995, rse=0.001)), measured(shape(rse=0.001)))
    assert not small.accepted and "needed >1.0%" in small.reason  # below the 1% floor
    noisy = decide(measured(shape(time_ms=0.95, rse=0.02)), measured(shape(rse=0.02)))
    assert not noisy.accepted and noisy.threshold == pytest.approx(3 * (2 * 0.02**2) ** 0.5)
    slower = decide(measured(shape(time_ms=1.2)), incumbent)
    assert not slower.accepted and "slower" in slower.reason


@pytest.mark.parametrize("status", ["incorrect", "fallback", "suspicious", "compile_error",
                                    "runtime_error", "timeout"])
def test_failed_candidates_are_never_accepted(status):
    fast = measured(shape(time_ms=0.01), status=status)
    assert not decide(fast, measured(shape())).accepted
    assert not decide(fast, None).accepted


def test_above_roofline_is_suspicious_whatever_the_gain():
    too_fast = measured(shape(time_ms=0.05, sol_ms=0.1))
    decision = decide(too_fast, measured(shape()))
    assert not decision.accepted and decision.status == "suspicious"
    edge = measured(shape(time_ms=0.1 / 1.04, sol_ms=0.1))  # within the 5% tolerance
    assert decide(edge, measured(shape())).accepted


def test_unverified_incumbent_and_untimed_candidates():
    assert decide(measured(shape()), measured(shape(), status="incorrect")).accepted
    untimed = measured(shape(time_ms=None))
    decision = decide(untimed, measured(shape(time_ms=None)))
    assert not decision.accepted and "no timing" in decision.reason
    strict = AcceptanceRule(min_gain=0.2)
    assert not decide(measured(shape(time_ms=0.85)), measured(shape()), strict).accepted


# -- memory and dropout ---------------------------------------------------------------------------
def _memory(n: int, success: int | None = None) -> AttemptMemory:
    memory = AttemptMemory()
    memory.add(MemoryItem(0, 0, "baseline", "pass", True, "", "", "b"), baseline=True)
    for i in range(1, n + 1):
        memory.add(MemoryItem(i, i, "llm", "incorrect", i == success, "", f"s{i}", "b",
                              source_sha=f"sha{i}"))
    return memory


def test_dropout_hides_half_keeps_baseline_and_last_success_and_is_seeded():
    memory = _memory(7, success=4)
    event = memory.dropout(random.Random(3), seed=3, stalled_rounds=3)
    assert len(event.hidden_attempts) == 3  # ceil(6 eligible / 2)
    assert 0 not in event.hidden_attempts and 4 not in event.hidden_attempts
    assert {0, 4} <= set(event.kept_attempts)
    assert {i.attempt for i in memory.visible()} == set(event.kept_attempts)
    again = _memory(7, success=4).dropout(random.Random(3), seed=3, stalled_rounds=3)
    assert again.hidden_attempts == event.hidden_attempts
    hidden = event.hidden_attempts[0]
    assert memory.tried("b", f"sha{hidden}") is None  # a hidden attempt may be retried
    kept = next(a for a in event.kept_attempts if a not in (0, 4))
    assert memory.tried("b", f"sha{kept}") is not None


# -- profiling ------------------------------------------------------------------------------------
def test_runner_classification():
    assert classify_from_runner(measured(shape(time_ms=1.0, sol_ms=0.1))).bottleneck == "latency"
    assert classify_from_runner(measured(shape(time_ms=0.15, sol_ms=0.1))).bottleneck == "memory"
    assert classify_from_runner(measured(shape(time_ms=0.01, sol_ms=0.001))).bottleneck == \
        "latency"  # launch-bound
    compute = measured(shape(time_ms=1.0, sol_ms=0.1, bound="compute"))
    assert classify_from_runner(compute).bottleneck == "compute"
    untimed = classify_from_runner(measured(shape(time_ms=None)))
    assert untimed.bottleneck == "memory" and "not timed" in untimed.evidence
    mix = measured(shape("big", 10.0, sol_ms=0.5, weight=1), shape("small", 0.1, sol_ms=0.09))
    assert classify_from_runner(mix).shape_id == "big"


_HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
           "Block Size", "Grid Size", "Device", "CC",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum",
           "launch__grid_size", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active"] + [
    STALL_METRIC.format(r) for r in ("long_scoreboard", "wait", "barrier")]
_ROWS = [
    ["", "", "", "", "", "", "", "", "", "", "", "%", "nsecond", "", "%", "%", "ratio", "ratio",
     "ratio"],
    ["0", "4242", "python3.12", "h", "_copy_prologue", "1", "7", "(128, 1, 1)", "(8, 1, 1)", "0",
     "9.0", "1.2", "2,016", "8", "0.8", "6.1", "0.5", "0.1", "0.0"],
    ["1", "4242", "python3.12", "h", "_rmsnorm_naive", "1", "7", "(32, 1, 1)", "(8192, 1, 1)",
     "0", "9.0", "11.5", "1,234,567", "8192", "7.9", "41.7", "22.61", "3.10", "0.02"],
]
NCU_CSV = "\n".join(
    ["==PROF== Connected to process 4242 (/usr/bin/python3.12)",
     '==PROF== Profiling "_copy_prologue": 0%....50%....100% - 9 passes']
    + [",".join(f'"{v}"' for v in row) for row in [_HEADER, *_ROWS]]
    + ["==PROF== Disconnected from process 4242"]) + "\n"


def test_ncu_csv_parse_and_classification():
    rows = parse_csv(NCU_CSV)
    assert [r["Kernel Name"] for r in rows] == ["_copy_prologue", "_rmsnorm_naive"]
    result = summarize(rows, {"_rmsnorm_naive"})
    assert result.kernel == "_rmsnorm_naive"
    assert result.metrics["duration_us"] == pytest.approx(1234.567)
    assert result.metrics["dram_pct"] == pytest.approx(11.5)
    assert result.stalls[0] == ("long_scoreboard", pytest.approx(22.61))
    profile = classify_from_ncu(result.metrics, result.stalls, "prefill", result.kernel)
    assert profile.bottleneck == "latency" and profile.source == "ncu"
    assert "long_scoreboard" in profile.evidence and "DRAM 12%" in profile.evidence
    assert classify_from_ncu({"dram_pct": 85.0, "sm_pct": 30.0, "duration_us": 500}, [], None,
                             "k").bottleneck == "memory"
    assert classify_from_ncu({"dram_pct": 20.0, "sm_pct": 75.0, "duration_us": 500}, [], None,
                             "k").bottleneck == "compute"
    assert classify_from_ncu({"dram_pct": 20.0, "sm_pct": 10.0, "duration_us": 500,
                              "achieved_occupancy_pct": 12.0}, [], None, "k").bottleneck == \
        "occupancy"
    assert own_kernel_names("import triton\n@triton.jit\ndef _k(x):\n    pass\n"
                            "def helper():\n    pass\n") == {"_k"}


# -- reply extraction -----------------------------------------------------------------------------
MODULE = "import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n"


@pytest.mark.parametrize("reply, problem", [
    ("Just raise the block size.", "no fenced code block"),
    ("```python\nprint('hi')\n```", "no code block defines class Model"),
    (f"a\n```python\n{MODULE}```\nb\n```python\n{MODULE}```", "2 code blocks"),
])
def test_malformed_replies(reply, problem):
    extraction = extract_module(reply)
    assert extraction.source is None and problem in extraction.problem


def test_one_module_is_extracted_with_its_explanation():
    reply = f"Use 8 warps.\n\n```python\n{MODULE}```\n\nAlso a shell line:\n```bash\nls\n```"
    extraction = extract_module(reply)
    assert extraction.source == MODULE and extraction.summary.startswith("Use 8 warps.")
    assert extract_module(f"```\n{MODULE}```").source == MODULE  # unlabeled fence


# -- proposer names, [agent] table, ranking -------------------------------------------------------
def test_proposer_lists():
    assert parse_proposers(None, llm_configured=False) == ["autotune", "kb"]
    assert parse_proposers(None, llm_configured=True) == ["llm", "autotune", "kb"]
    assert parse_proposers(["kb", "autotune,llm"], True) == ["kb", "autotune", "llm"]
    with pytest.raises(ValueError, match="unknown proposer"):
        parse_proposers(["gpt"], False)


def test_agent_table_is_validated():
    table = agent_table({"proposers": ["kb"], "gpu_minutes": 5, "families": {"x": "rmsnorm"}},
                        None)
    assert table["gpu_minutes"] == 5.0
    with pytest.raises(FormatError, match="agent.speed"):
        agent_table({"speed": 3}, None)
    with pytest.raises(FormatError, match="must be of type int"):
        agent_table({"max_iters": "many"}, None)


def _report(ops) -> Report:
    return Report(device=DeviceInfo(kind="cuda", name="H200"), ops=ops, timing_available=True)


def test_rank_ops_by_gpu_hours_at_stake():
    ops = [OpResult("a", Status.PASS, score=0.5, importance=0.2, gpu_hours_at_stake=3.0),
           OpResult("b", Status.PASS, score=0.1, importance=0.5, gpu_hours_at_stake=9.0),
           OpResult("c", Status.INCORRECT, score=0.0, importance=0.3)]
    ranked = rank_ops_by_stake(_report(ops))
    assert [s.op for s in ranked] == ["b", "a"] and ranked[0].basis == "gpu_hours"
    assert [s.op for s in rank_ops_by_stake(_report(ops), limit=1)] == ["b"]
    no_hours = [OpResult("a", Status.PASS, score=0.5, importance=0.2),
                OpResult("b", Status.PASS, score=0.9, importance=0.8)]
    ranked = rank_ops_by_stake(_report(no_hours))
    assert [s.op for s in ranked] == ["a", "b"]  # 0.2 x (1 - 0.5) = 0.10 > 0.8 x (1 - 0.9)
    assert ranked[0].basis == "importance x (1 - E_op)"


FAKE_NCU = """#!/bin/bash
# a stand-in for Nsight Compute: rejects the stall metrics, then answers the core set
echo "$@" >> "$(dirname "$0")/calls.txt"
if [[ "$*" == *stalled* ]]; then echo "==ERROR== Failed to find metric smsp__x"; exit 1; fi
echo '==PROF== Connected to process 1'
echo '"ID","Kernel Name","gpu__time_duration.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active"'
echo '"","","nsecond","%","%","%"'
echo '"0","_rmsnorm_naive","250,000","81.5","20.1","90.0"'
"""  # noqa: E501


def test_profiler_uses_ncu_and_falls_back(tmp_path, monkeypatch):
    from atrex.agent.measure import CandidateFile, GpuClock
    from atrex.agent.profiling import Profiler
    from atrex.runner.repo import load_repo
    from conftest import NAIVE

    op = load_repo(NAIVE, ["rmsnorm"]).op("rmsnorm")
    candidate = CandidateFile((op.path / "kernel.py").read_text(), op.path / "kernel.py",
                              op.path)
    incumbent = measured(shape("prefill-8192", time_ms=1.0, sol_ms=0.03))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").write_text(FAKE_NCU)
    (bin_dir / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    profile = Profiler(op, "cuda", "auto", GpuClock(600.0)).profile(candidate, incumbent)
    assert profile.source == "ncu" and profile.bottleneck == "memory"
    assert profile.metrics["duration_us"] == pytest.approx(250.0)
    calls = (bin_dir / "calls.txt").read_text().splitlines()
    assert len(calls) == 2 and "--clock-control none" in calls[0]
    assert "stalled" in calls[0] and "stalled" not in calls[1]

    (bin_dir / "ncu").write_text("#!/bin/bash\necho '==ERROR== ERR_NVGPUCTRPERM'\nexit 1\n")
    profiler = Profiler(op, "cuda", "auto", GpuClock(600.0))
    broken = profiler.profile(candidate, incumbent)
    assert broken.source == "runner" and "ERR_NVGPUCTRPERM" in broken.note
    assert Profiler(op, "cuda", "off", GpuClock(600.0)).profile(candidate,
                                                                incumbent).source == "runner"
    tight = GpuClock(60.0)
    tight.charge(50.0, evaluation=True)
    skipped = Profiler(op, "cuda", "auto", tight).profile(candidate, incumbent)
    assert skipped.source == "runner" and "budget" in skipped.note


@pytest.mark.parametrize("url, repo", [
    ("https://github.com/acme/kernels.git", "acme/kernels"),
    ("https://x-access-token:abc@github.com/acme/kernels", "acme/kernels"),
    ("git@github.com:acme/kernels.git", "acme/kernels"),
    ("ssh://git@ghe.corp.example/acme/kernels.git", "acme/kernels"),
    ("/tmp/origin.git", None),
    ("../origin", None),
])
def test_parse_repo_url(url, repo):
    from atrex.agent.cli import parse_repo_url

    assert parse_repo_url(url) == repo
