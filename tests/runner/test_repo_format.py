"""Malformed repositories: an error naming the file and field, exit code 2, through the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from atrex.runner.errors import FormatError
from atrex.runner.repo import load_repo

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_OP = ROOT / "tests" / "adversarial" / "ops" / "rmsnorm"


@pytest.fixture
def repo(tmp_path):
    shutil.copytree(EXAMPLE_OP, tmp_path / "ops" / "rmsnorm")
    (tmp_path / "atrex.toml").write_text('[repo]\nops_root = "ops"\n')
    return tmp_path


def op_dir(repo: Path) -> Path:
    return repo / "ops" / "rmsnorm"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atrex", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def expect_error(repo: Path, *fragments: str) -> None:
    with pytest.raises(FormatError) as info:
        load_repo(repo)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    result = run_cli("check", str(repo), "--quiet")
    assert result.returncode == 2, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


def test_well_formed_repo_loads(repo):
    spec = load_repo(repo)
    assert [op.name for op in spec.ops] == ["rmsnorm"]
    assert [s.id for s in spec.ops[0].shapes] == ["cpu", "gpu"]
    assert spec.ops[0].forward_params == ["x", "weight"]


def test_missing_file(repo):
    (op_dir(repo) / "input.py").unlink()
    expect_error(repo, "input.py", "missing")


def test_bad_json(repo):
    (op_dir(repo) / "shapes.json").write_text('{"cpu": {"input_kwargs": {"token_count": 4,}}}')
    expect_error(repo, "shapes.json", "line 1", "not valid JSON")


def test_input_kwargs_not_a_parameter(repo):
    shapes = json.loads((op_dir(repo) / "shapes.json").read_text())
    shapes["cpu"]["input_kwargs"]["hidden"] = 3
    (op_dir(repo) / "shapes.json").write_text(json.dumps(shapes))
    expect_error(repo, "shapes.json", "cpu.input_kwargs.hidden", "not a parameter")


def test_make_inputs_keys_do_not_match_forward(repo):
    text = (op_dir(repo) / "input.py").read_text().replace('"weight": weight', '"w": weight')
    (op_dir(repo) / "input.py").write_text(text)
    expect_error(repo, "input.py", "_make_inputs", "do not match")


def test_unknown_dtype(repo):
    (op_dir(repo) / "metadata.json").write_text(json.dumps({"dtype": "bf17"}))
    expect_error(repo, "metadata.json", "dtype", "unknown dtype 'bf17'")


def test_metadata_shape_id_that_does_not_exist(repo):
    (op_dir(repo) / "metadata.json").write_text(
        json.dumps({"shapes": {"decode-99": {"call_count": 3}}}))
    expect_error(repo, "metadata.json", "shapes.decode-99", "does not exist")


def test_unknown_config_key(repo):
    (repo / "atrex.toml").write_text('[thresholds]\nown_kernel_shar = 0.8\n')
    expect_error(repo, "atrex.toml", "thresholds.own_kernel_shar", "unknown key")


def test_bad_config_value(repo):
    (repo / "atrex.toml").write_text('[thresholds]\nown_kernel_share = 1.5\n')
    expect_error(repo, "atrex.toml", "thresholds.own_kernel_share", "between 0 and 1")


def test_unknown_op_filter(repo):
    result = run_cli("check", str(repo), "--op", "softmax", "--quiet")
    assert result.returncode == 2
    assert "no operator named softmax" in result.stderr


def test_discovery_without_config(tmp_path):
    """A directory with some of the four files is an operator with files missing, never
    skipped in silence; a lone input.py elsewhere is not an operator."""
    shutil.copytree(EXAMPLE_OP, tmp_path / "nested" / "deeper" / "rmsnorm")
    (tmp_path / "incomplete").mkdir()
    (tmp_path / "incomplete" / "reference.py").write_text("class Model:\n    pass\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "input.py").write_text("")
    # a package's reference.py (a virtualenv inside the repository) is no operator
    (tmp_path / "venv" / "lib" / "site-packages" / "pkg").mkdir(parents=True)
    (tmp_path / "venv" / "lib" / "site-packages" / "pkg" / "reference.py").write_text(
        "class Model:\n    pass\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "reference.py").write_text("def reference():\n    pass\n")
    spec = load_repo(tmp_path, strict=False)
    assert [op.name for op in spec.ops] == ["rmsnorm"]
    assert [p.name for p in spec.problems] == ["incomplete"]
    assert "not input.py, shapes.json, kernel.py" in spec.problems[0].error.message
    with pytest.raises(FormatError, match="missing file"):
        load_repo(tmp_path)


def test_runtime_format_error_from_worker(repo):
    """_make_inputs built dynamically: the key mismatch is found when the worker draws inputs."""
    (op_dir(repo) / "input.py").write_text(
        "import torch\n\n\ndef _make_inputs(token_count, hidden_size):\n"
        "    names = ['x', 'w']\n"
        "    return {n: torch.randn(token_count, hidden_size) for n in names}\n")
    result = run_cli("check", str(repo), "--quiet", "--device", "cpu")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "input.py: _make_inputs" in result.stderr and "'w'" in result.stderr


def test_misspelt_metadata_field(repo):
    (op_dir(repo) / "metadata.json").write_text(
        json.dumps({"shapes": {"cpu": {"call_counts": 3}}}))
    expect_error(repo, "metadata.json", "shapes.cpu.call_counts", "unknown field")
