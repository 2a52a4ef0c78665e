"""`atrex bench --resume`: a run cut short goes on from the operators it finished, in one
document; it refuses to mix machines, software or contestants, and loses nothing when it does.
Also a baseline's own account of what it ran (`atrex_implementation`), which a candidate's
claim never becomes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_REFERENCE = ("import torch\n\n\nclass Model(torch.nn.Module):\n"
              "    def forward(self, x):\n        return x * {k}\n")
_INPUT = "import torch\n\n\ndef _make_inputs(n):\n    return {'x': torch.randn(n)}\n"
_KERNEL = ("from reference import Model as _Reference\n\n\nclass Model(_Reference):\n"
           "    atrex_implementation = 'a claim the candidate makes about itself'\n")
_LIBRARY = ("import torch\n\n\nclass Model(torch.nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n"
            "        self.atrex_implementation = None\n\n"
            "    def forward(self, x):\n"
            "        self.atrex_implementation = 'torch.mul, the  only path\\nthere is'\n"
            "        return torch.mul(x, 2)\n")


def _suite(root: Path) -> Path:
    for name, k in (("double", 2), ("triple", 3)):
        op = root / name
        op.mkdir(parents=True)
        (op / "reference.py").write_text(_REFERENCE.format(k=k))
        (op / "input.py").write_text(_INPUT)
        (op / "kernel.py").write_text(_KERNEL)
        (op / "shapes.json").write_text(json.dumps({"a": {"input_kwargs": {"n": 8}}}))
    (root / "double" / "library.py").write_text(_LIBRARY)
    return root


def _bench(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atrex", "bench", str(repo), "--device", "cpu",
                           "--baselines", "eager,library,kb", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def _progress(stderr: str) -> list[str]:
    return [line.split("] ")[1].split(" (")[0] for line in stderr.splitlines()
            if line.startswith("atrex bench: [")]


def test_a_resumed_run_finishes_the_rest_into_one_document(tmp_path):
    repo = _suite(tmp_path / "suite")
    out = tmp_path / "bench.json"
    first = _bench(repo, "--op", "double", "--json", str(out))  # a part that stopped early
    assert first.returncode == 0, first.stderr[-3000:]
    state = tmp_path / "bench.reports.json"
    assert json.loads(state.read_text())["sessions"][0]["ops"] == ["double"]
    before = json.loads(out.read_text())["instances"][0]

    second = _bench(repo, "--resume", "--json", str(out), "--markdown", "-")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "1 operators done, 1 to run" in second.stderr
    assert _progress(second.stderr) == ["triple / a"]  # double was not run again
    doc = json.loads(out.read_text())
    assert doc["complete"] and doc["not_evaluated"] == []
    assert [i["op"] for i in doc["instances"]] == ["double", "triple"]
    assert doc["instances"][0]["results"] == before["results"]
    assert sum(i["importance"] for i in doc["instances"]) == 1.0  # renormalized over both
    assert [p["ops"] for p in doc["sessions"]] == [["double"], ["triple"]]
    assert "One run in 2 parts" in second.stdout

    library = doc["instances"][0]["results"]["library"]["shapes"]["a"]
    assert library["implementation"] == "torch.mul, the only path there is"
    assert doc["instances"][0]["results"]["kb"]["shapes"]["a"]["implementation"] is None
    assert "- `double` library (`a`): torch.mul, the only path there is" in second.stdout
    assert "a claim the candidate makes" not in out.read_text() + second.stdout
    _parts_on_two_cards_are_said_to_be(doc)


def _parts_on_two_cards_are_said_to_be(doc: dict) -> None:
    """A CPU run has no card; the same document as two GPU parts would record it: each part's
    card, and a warning where they differ (cards of one model differ by a few percent)."""
    from atrex.runner.bench import bench_markdown

    assert all("gpu_uuid" not in part for part in doc["sessions"])
    doc["device"]["uuid"] = "GPU-b"
    for part, card in zip(doc["sessions"], ("GPU-a", "GPU-b"), strict=True):
        part["gpu_uuid"] = card
    text = bench_markdown(doc)
    assert ", card GPU-b;" in text.splitlines()[2]
    assert "- started {}: double (card GPU-a)".format(doc["sessions"][0]["started_at"]) in text
    assert "The parts ran on 2 different cards of that model" in text
    doc["sessions"][0]["gpu_uuid"] = "GPU-b"
    text = bench_markdown(doc)
    assert "different cards" not in text and "(card GPU-b)" not in text


def test_resuming_on_other_software_is_refused_and_loses_nothing(tmp_path):
    repo = _suite(tmp_path / "suite")
    out = tmp_path / "bench.json"
    assert _bench(repo, "--op", "double", "--json", str(out)).returncode == 0
    state = tmp_path / "bench.reports.json"
    data = json.loads(state.read_text())
    for report in data["reports"].values():
        report["device"]["torch"] = "0.0.1"
    state.write_text(json.dumps(data))
    kept = out.read_bytes(), state.read_bytes()

    refused = _bench(repo, "--resume", "--json", str(out))
    assert refused.returncode == 2
    assert "cannot resume this bench run on another machine or software: torch '0.0.1' then" \
        in refused.stderr
    assert _progress(refused.stderr) == []
    assert (out.read_bytes(), state.read_bytes()) == kept

    other = subprocess.run([sys.executable, "-m", "atrex", "bench", str(repo), "--device",
                            "cpu", "--baselines", "eager,kb", "--resume", "--json", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert other.returncode == 2
    assert "bench.reports.json: field baselines: the run being resumed used " \
        "['eager', 'library', 'kb'], this one ['eager', 'kb']" in other.stderr
    assert (out.read_bytes(), state.read_bytes()) == kept


def test_resume_needs_a_json_file(tmp_path):
    repo = _suite(tmp_path / "suite")
    result = _bench(repo, "--resume")
    assert result.returncode == 2 and "--resume continues the run of a --json FILE" \
        in result.stderr
