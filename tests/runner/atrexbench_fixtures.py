"""Operator directories in Atrex-Bench's published format, written for atrex's tests.

The format as Atrex-Bench's data has it at its current head: no kernel.py (a kernel team adds
its own), shapes.json entries with only init_kwargs / input_kwargs, metadata.json with
descriptive fields atrex does not act on (origin, phase, status, input/output dtypes such as
"bf16/fp16", and per shape shape_key, source_framework, source_kernel_name,
tensor_parallel_size, production_performance keyed by hardware, total_duration_us null),
input generators that build their dict at run time and omit `forward` parameters that have a
default, and outputs in AMD's float8 encodings. Nothing here is copied from Atrex-Bench.
"""

from __future__ import annotations

import json
from pathlib import Path

QKV_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim

    def forward(self, qkv: torch.Tensor, positions: torch.Tensor,
                qkv_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if qkv_bias is not None:
            qkv = qkv + qkv_bias
        n = self.num_heads * self.head_dim
        q = qkv[..., :n].float() * (1.0 + positions.float().unsqueeze(-1) / 1024.0)
        return q.to(qkv.dtype), qkv[..., n:].contiguous()
'''

QKV_INPUT = '''import torch


def _make_inputs(tokens: int, num_heads: int, head_dim: int, with_bias: bool = False,
                 dtype: str = "bf16") -> dict[str, torch.Tensor]:
    dt = torch.bfloat16 if dtype == "bf16" else torch.float16
    width = 2 * num_heads * head_dim
    result: dict[str, torch.Tensor] = {
        "qkv": torch.randn(tokens, width, dtype=dt, device="cuda"),
        "positions": torch.arange(tokens, dtype=torch.int32, device="cuda"),
    }
    if with_bias:
        result["qkv_bias"] = torch.randn(width, dtype=dt, device="cuda") * 0.01
    return result
'''

QUANT_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.finfo = torch.finfo(torch.{dtype})

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wide = x.to(torch.float32)
        scale = wide.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / self.finfo.max
        q = (wide / scale).clamp(min=self.finfo.min, max=self.finfo.max)
        return q.to(torch.{dtype}), scale.squeeze(-1)
'''

QUANT_INPUT = '''import torch


def _make_inputs(token_count: int, hidden_size: int) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device="cuda")}
'''

SCALE_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        amax = x.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
        return amax.to(torch.float8_e8m0fnu), x
'''


def _shape_meta(index: int, **extra) -> dict:
    return {"description": f"(rtp-llm TP1), test shape {index}", "shape_key": f"({index},)",
            "source_framework": "rtp-llm", "source_kernel_name": f"_ZN4test{index}kernel",
            "tensor_parallel_size": 1,
            "production_performance": {"XPU-A": {"framework": "aiter", "performance_us": 7.5}},
            **extra}


def write_qkv_rope(root: Path, kernel: str | None = None) -> Path:
    op = root / "fused_qkv_rope"
    op.mkdir(parents=True)
    (op / "reference.py").write_text(QKV_REFERENCE)
    (op / "input.py").write_text(QKV_INPUT)
    shapes = {str(i): {"init_kwargs": {"num_heads": 2, "head_dim": 16},
                       "input_kwargs": {"tokens": tokens, "num_heads": 2, "head_dim": 16,
                                        "dtype": "bf16"}}
              for i, tokens in enumerate((8, 4))}
    (op / "shapes.json").write_text(json.dumps(shapes, indent=2))
    (op / "metadata.json").write_text(json.dumps({
        "id": "fused_qkv_rope", "status": "trace_reference", "dtype": "bf16",
        "input_dtypes": {"qkv": "bf16/fp16", "positions": "int32", "qkv_bias": "bf16/fp16"},
        "output_dtypes": {"q": "bf16/fp16", "kv": "bf16/fp16"},
        "origin": {"framework": "rtp-llm", "symbol": "fused_qkv", "module": "test"},
        "phase": "prefill/decode", "importance_score": 0.03,
        "shapes": {"0": _shape_meta(0, call_count=12, total_duration_us=None),
                   "1": _shape_meta(1, call_count=4, total_duration_us=30.0)}}, indent=2))
    if kernel is not None:
        (op / "kernel.py").write_text(kernel)
    return op


def write_fp8_quant(root: Path, dtype: str = "float8_e4m3fnuz", name: str = "fp8_quant",
                    kernel: str | None = None) -> Path:
    op = root / name
    op.mkdir(parents=True)
    (op / "reference.py").write_text(QUANT_REFERENCE.format(dtype=dtype))
    (op / "input.py").write_text(QUANT_INPUT)
    (op / "shapes.json").write_text(json.dumps(
        {"0": {"init_kwargs": None, "input_kwargs": {"token_count": 4, "hidden_size": 64}}}))
    (op / "metadata.json").write_text(json.dumps({
        "id": name, "status": "trace_reference", "dtype": "fp8_e4m3", "phase": "prefill/decode",
        "input_dtypes": {"x": "bf16"}, "output_dtypes": {"q": "fp8_e4m3", "scale": "fp32"},
        "importance_score": 0.01, "shapes": {"0": _shape_meta(0, call_count=3)}}))
    if kernel is not None:
        (op / "kernel.py").write_text(kernel)
    return op


def write_e8m0_scale(root: Path, kernel: str | None = None) -> Path:
    """An operator with a float8_e8m0fnu output, a dtype atrex has no default tolerance for."""
    op = root / "e8m0_scale"
    op.mkdir(parents=True)
    (op / "reference.py").write_text(SCALE_REFERENCE)
    (op / "input.py").write_text(QUANT_INPUT)
    (op / "shapes.json").write_text(json.dumps(
        {"0": {"init_kwargs": None, "input_kwargs": {"token_count": 4, "hidden_size": 32}}}))
    if kernel is not None:
        (op / "kernel.py").write_text(kernel)
    return op
