"""Candidates run in a scrubbed subprocess: no secrets in their environment, HOME is scratch."""

from __future__ import annotations

import shutil
from pathlib import Path

from atrex.runner.evaluate import EvalOptions, evaluate
from atrex.runner.model import Status
from atrex.runner.repo import load_repo
from atrex.runner.sandbox import CandidateRef, scrubbed_env

OPS = Path(__file__).resolve().parents[2] / "tests" / "adversarial"

SECRET_PROBE = '''
import os
import torch
from _rms_triton import rms

LEAKED = sorted(k for k in os.environ if "SECRET" in k or "TOKEN" in k or k.startswith("ATREX_"))


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if LEAKED or os.environ.get("HOME") == os.path.expanduser("~root"):
            raise RuntimeError(f"saw secrets: {LEAKED}")
        return rms(x, weight, self.eps)
'''


def test_scrubbed_env_drops_secrets(tmp_path):
    env = scrubbed_env("cpu", 0, tmp_path, source={
        "PATH": "/usr/bin", "GITHUB_TOKEN": "ghs_x", "ATREX_WEBHOOK_SECRET": "s",
        "OPENAI_API_KEY": "sk", "CUDA_HOME": "/usr/local/cuda", "AWS_SECRET_ACCESS_KEY": "a",
        "TORCH_CUDA_ARCH_LIST": "9.0", "NCCL_NVLS_ENABLE": "0"})
    assert "GITHUB_TOKEN" not in env and "ATREX_WEBHOOK_SECRET" not in env
    assert "OPENAI_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["CUDA_HOME"] == "/usr/local/cuda" and env["NCCL_NVLS_ENABLE"] == "0"
    assert env["HOME"] == str(tmp_path) and env["TRITON_INTERPRET"] == "1"


def test_candidate_cannot_see_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("ATREX_WEBHOOK_SECRET", "hunter2")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    repo = tmp_path / "repo"
    shutil.copytree(OPS / "ops" / "rmsnorm", repo / "rmsnorm")
    cand = tmp_path / "cand"
    shutil.copytree(OPS / "ops" / "rmsnorm", cand)
    shutil.copy(OPS / "cheats" / "_rms_triton.py", cand)
    (cand / "kernel.py").write_text(SECRET_PROBE)
    spec = load_repo(repo)
    reports = evaluate(spec, {"rmsnorm": [CandidateRef("probe", cand / "kernel.py", cand)]},
                       EvalOptions(device="cpu"))
    op = reports["probe"].op("rmsnorm")
    assert op.status is Status.PASS, [s.message for s in op.shapes]
