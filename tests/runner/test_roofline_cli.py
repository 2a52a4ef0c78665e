"""`atrex roofline PATH`: per operator and shape, W by class, Q read/written per tensor, T_SOL
and the bound, each with where it came from (counted, touched rows, declared)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PAGED_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, q, k_cache, block_table, seq_lens):
        outs = []
        for b, n in enumerate(seq_lens.tolist()):
            pages = block_table[b, : (n + 3) // 4]
            slots = (pages[:, None] * 4 + torch.arange(4)).reshape(-1)[:n]
            keys = k_cache.reshape(-1, 8).index_select(0, slots).float()
            outs.append(torch.softmax(q[b].float() @ keys.t(), -1) @ keys)
        return torch.stack(outs).to(q.dtype)
'''
PAGED_INPUT = '''
import torch


def _make_inputs(pages: int):
    return {"q": torch.randn(2, 8, dtype=torch.bfloat16, device="cuda"),
            "k_cache": torch.randn(pages, 4, 8, dtype=torch.bfloat16, device="cuda"),
            "block_table": torch.tensor([[3, 7, 0], [5, 0, 0]], dtype=torch.int32,
                                        device="cuda"),
            "seq_lens": torch.tensor([6, 3], dtype=torch.int32, device="cuda")}
'''
SCALE_REFERENCE = '''
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2
'''
SCALE_INPUT = '''
import torch


def _make_inputs(n: int):
    return {"x": torch.randn(n, device="cuda")}
'''
KERNEL = '''
import torch.nn as nn


class Model(nn.Module):
    def forward(self, **inputs):
        raise NotImplementedError
'''


def _op(root: Path, name: str, reference: str, inputs: str, shapes: dict,
        metadata: dict | None = None) -> None:
    op = root / name
    op.mkdir(parents=True)
    (op / "reference.py").write_text(textwrap.dedent(reference))
    (op / "input.py").write_text(textwrap.dedent(inputs))
    (op / "kernel.py").write_text(textwrap.dedent(KERNEL))
    (op / "shapes.json").write_text(json.dumps(shapes))
    if metadata:
        (op / "metadata.json").write_text(json.dumps(metadata))


def _roofline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atrex", "roofline", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_roofline_audits_counted_touched_and_declared_work(tmp_path):
    repo = tmp_path / "repo"
    _op(repo, "paged", PAGED_REFERENCE, PAGED_INPUT, {"pool-10": {"input_kwargs": {"pages": 10}}})
    _op(repo, "scale", SCALE_REFERENCE, SCALE_INPUT,
        {"n1000": {"input_kwargs": {"n": 1000}}, "n8": {"input_kwargs": {"n": 8}}},
        {"shapes": {"n1000": {"bytes": 1000}}})
    out = tmp_path / "floors.json"
    done = _roofline(str(repo), "--json", str(out), "--device", "cpu")
    assert done.returncode == 0, done.stderr
    floors = {(f["op"], f["shape"]): f for f in json.loads(out.read_text())["floors"]}

    paged = floors[("paged", "pool-10")]
    assert paged["bytes_source"] == "touched" and paged["flops_source"] == "counted"
    assert paged["bytes_read"] == 9 * 8 * 2 + 3 * 4 + 2 * 4 + 2 * 8 * 2  # keys, pages, lens, q
    assert paged["bytes_written"] == 2 * 8 * 2
    assert paged["flops"]["bf16"] == 9 * 2 * 8 * 2
    assert paged["bound"] == "memory"
    assert paged["sol_ms"] == paged["memory_ms"] == paged["bytes"] / 4.8e9

    declared = floors[("scale", "n1000")]
    assert declared["bytes_source"] == "declared" and declared["bytes"] == 1000
    assert declared["flops"] == {"fp32_vector": 1000.0}
    counted = floors[("scale", "n8")]
    assert counted["bytes_source"] == "counted" and counted["bytes"] == 2 * 8 * 4

    text = done.stdout
    assert "paged / pool-10" in text and "rows touched (index rule)" in text
    assert "k_cache" in text and "= 72 of 320 elements" in text
    assert "aten.mm x4" in text or "aten.mm" in text
    assert "Q (declared)" in text
    assert "roofline floors against the NVIDIA H200 SXM datasheet" in text

    piped = _roofline(str(repo), "--json", "-", "--device", "cpu", "--brief")
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["floors"] == json.loads(out.read_text())["floors"]
    assert "roofline floors against" in piped.stderr


def test_roofline_usage_errors_exit_2(tmp_path, capsys):
    from atrex.cli import main

    repo = tmp_path / "repo"
    _op(repo, "scale", SCALE_REFERENCE, SCALE_INPUT, {"n8": {"input_kwargs": {"n": 8}}})
    assert main(["roofline", str(repo), "--gpu", "no_such_gpu"]) == 2
    assert "no peak table 'no_such_gpu'" in capsys.readouterr().err
    assert main(["roofline", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["roofline", str(repo), "--shape", "nope"]) == 2
    assert "no shape named nope" in capsys.readouterr().err


def test_roofline_needs_only_the_reference(tmp_path, capsys):
    """A benchmark's data directory without a kernel (Atrex-Bench's data/) has a floor too."""
    from atrex.cli import main

    repo = tmp_path / "repo"
    _op(repo, "scale", SCALE_REFERENCE, SCALE_INPUT, {"n8": {"input_kwargs": {"n": 8}}})
    (repo / "scale" / "kernel.py").unlink()
    assert main(["roofline", str(repo), "--device", "cpu", "--brief"]) == 0
    assert "scale" in capsys.readouterr().out
    (repo / "scale" / "input.py").unlink()
    assert main(["roofline", str(repo), "--device", "cpu"]) == 2
    assert "not input.py" in capsys.readouterr().err


def test_judge_reports_counted_and_declared_work(tmp_path):
    """The judge's count reaches the report with its split and provenance; a declared `bytes`
    overrides Q and says so."""
    import shutil

    from atrex.runner.evaluate import EvalOptions, evaluate_repo
    from atrex.runner.repo import load_repo

    op = tmp_path / "rmsnorm"
    shutil.copytree(ROOT / "tests" / "adversarial" / "ops" / "rmsnorm", op)
    (op / "metadata.json").write_text(json.dumps({"shapes": {"cpu": {"bytes": 12345}}}))
    report = evaluate_repo(load_repo(tmp_path), EvalOptions(device="cpu", trials=1))
    shape = report.op("rmsnorm").shapes[0]
    assert shape.status.value == "pass", shape.message
    assert shape.bytes == 12345 and shape.bytes_source == "declared"
    assert shape.bytes_read is None and shape.bytes_written is None
    assert shape.flops_source == "counted"
    # rmsnorm over 6 x 200 in fp32 after the upcast: square, mean, scale, weight per element,
    # plus eps and rsqrt per row
    assert shape.flops_by_class == {"fp32_vector": 4 * 6 * 200 + 2 * 6}


def test_a_failed_count_says_so():
    """When the counter fails on a reference, the floor is every tensor once with no FLOPs, and
    the report's sources say `uncounted` instead of passing it off as counted."""
    from atrex.runner.judge.oracle import _tally
    from atrex.runner.model import WorkSource

    tally = _tally(None, (1000.0, 200.0))
    assert tally.flops == {} and tally.bytes == 1200.0
    assert (tally.bytes_read, tally.bytes_written) == (1000.0, 200.0)
    assert tally.flops_source is WorkSource.UNCOUNTED and tally.bytes_source is WorkSource.UNCOUNTED
