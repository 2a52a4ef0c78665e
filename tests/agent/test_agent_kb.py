"""Knowledge base: the strict loader, retrieval, and every kernel entry verified by the runner."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from atrex.agent.kb import KbError, family_of, load_entry, load_kb, retrieve
from atrex.runner.evaluate import EvalOptions, evaluate_repo
from atrex.runner.repo import load_repo
from conftest import NAIVE

KERNEL_FOR_OP = {"rmsnorm": "rmsnorm-row-tile", "fused_add_rmsnorm": "fused-add-rmsnorm-row-tile",
                 "silu_and_mul": "silu-and-mul-2d-grid", "softmax": "softmax-row-tile"}
# shapes that reach the looped (wide-row) paths and a single row, on the CPU
EXTRA_SHAPES = {
    "rmsnorm": {"token_count": 3, "hidden_size": 9000},
    "fused_add_rmsnorm": {"token_count": 3, "hidden_size": 9000},
    "silu_and_mul": {"token_count": 3, "intermediate_size": 2500},
    "softmax": {"rows": 3, "cols": 17000},
}


def test_bundled_kb_loads_and_is_complete():
    entries = load_kb()
    kernels = {e.id for e in entries if e.kind == "kernel"}
    notes = [e for e in entries if e.kind == "note"]
    assert set(KERNEL_FOR_OP.values()) <= kernels
    assert len(notes) >= 6
    for note in notes:
        body = note.body()
        assert "When it applies" in body and "How" in body and "Evidence on H200" in body


def _write_entry(root: Path, entry_id: str, toml: str, files: dict[str, str]) -> Path:
    directory = root / entry_id
    directory.mkdir(parents=True)
    (directory / "entry.toml").write_text(toml)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


NOTE_TOML = """id = "{id}"
kind = "note"
title = "t"
families = ["rmsnorm"]
dtypes = ["any"]
gpus = ["any"]
bottlenecks = ["memory"]
summary = "s"
"""


@pytest.mark.parametrize("mutation, files, message", [
    (lambda t: t + 'colour = "red"\n', {"note.md": "x"}, "unknown key"),
    (lambda t: t.replace('summary = "s"\n', ""), {"note.md": "x"}, "missing required key"),
    (lambda t: t.replace('["memory"]', '["bandwidth"]'), {"note.md": "x"}, "not one of"),
    (lambda t: t.replace('id = "e1"', 'id = "other"'), {"note.md": "x"}, "directory name"),
    (lambda t: t, {}, "needs note.md"),
    (lambda t: t.replace('"note"', '"kernel"') + 'forward = ["x", "weight"]\n',
     {"kernel.py": "class Model:\n    def forward(self, x):\n        return x\n"},
     r"Model.forward takes \['x'\]"),
    (lambda t: t.replace('"note"', '"kernel"'), {"kernel.py": "class Model: pass\n"},
     "must list the forward parameter names"),
])
def test_loader_is_strict(tmp_path, mutation, files, message):
    directory = _write_entry(tmp_path, "e1", mutation(NOTE_TOML.format(id="e1")), files)
    with pytest.raises(KbError, match=message):
        load_entry(directory)


def test_retrieval_ranks_by_family_signature_and_bottleneck():
    entries = load_kb()
    assert family_of("fused_add_rmsnorm", entries) == "fused_add_rmsnorm"
    assert family_of("llama_rms_norm_v2", entries) == "rmsnorm"
    assert family_of("my_op", entries, {"my_op": "softmax"}) == "softmax"
    kernels = retrieve(entries, "rmsnorm", "bf16", "h200_sxm", "latency",
                       forward=["x", "weight"], kind="kernel")
    assert [r.entry.id for r in kernels] == ["rmsnorm-row-tile"]
    assert retrieve(entries, "rmsnorm", "bf16", "h200_sxm", "latency",
                    forward=["x", "w", "eps"], kind="kernel") == []
    memory_notes = retrieve(entries, "softmax", "bf16", "h200_sxm", "memory", kind="note",
                            limit=2)
    assert memory_notes[0].entry.id == "note-online-softmax"
    latency_notes = retrieve(entries, "rmsnorm", "bf16", "h200_sxm", "latency", kind="note",
                             limit=3)
    assert latency_notes[0].entry.id == "note-rows-per-program"
    assert all("latency" in r.entry.bottlenecks for r in latency_notes)


def test_every_kb_kernel_passes_the_runner(tmp_path):
    """Each kernel entry, dropped into the matching naive operator, passes every CPU shape."""
    for op, entry_id in KERNEL_FOR_OP.items():
        target = tmp_path / "ops" / op
        shutil.copytree(NAIVE / op, target)
        shapes = json.loads((target / "shapes.json").read_text())
        small = shapes["cpu-small"]
        one_row = {k: 1 if k in ("token_count", "rows") else v
                   for k, v in small["input_kwargs"].items()}
        shapes = {"cpu-small": small, "cpu-wide": {**small, "input_kwargs": EXTRA_SHAPES[op]},
                  "cpu-one-row": {**small, "input_kwargs": one_row}}
        (target / "shapes.json").write_text(json.dumps(shapes))
        entry = next(e for e in load_kb() if e.id == entry_id)
        (target / "kernel.py").write_text(entry.body())
    report = evaluate_repo(load_repo(tmp_path / "ops"), EvalOptions(device="cpu"))
    for op in report.ops:
        assert op.status.value == "pass", (op.name, [s.message for s in op.shapes])
        assert op.own_kernel_share == 1.0
