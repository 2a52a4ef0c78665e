"""Candidate modules for the scripted-LLM loop test, derived from the naive RMSNorm kernel.

The test timer reads the ``# atrex-test-speedup: X`` comment (see test_agent_llm_loop.py); it is a
test seam only - the runner measures no time on a CPU.
"""

from __future__ import annotations

from pathlib import Path

NAIVE_RMSNORM = (Path(__file__).resolve().parents[2] / "benchmarks" / "agent_naive" / "rmsnorm"
                 / "kernel.py").read_text()


def with_speedup(source: str, speedup: float, tag: str = "") -> str:
    return f"# atrex-test-speedup: {speedup}\n# {tag}\n" + source


def compile_error() -> str:
    # a missing comma in the kernel's signature
    return NAIVE_RMSNORM.replace("(x_ptr, w_ptr,", "(x_ptr w_ptr,")


def wrong_result() -> str:
    # forgets the weight
    return with_speedup(NAIVE_RMSNORM.replace("(x * inv_rms * w)", "(x * inv_rms)"), 4.0)


def improved(speedup: float = 3.0, tag: str = "improved") -> str:
    source = NAIVE_RMSNORM.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = 256").replace(
        "NUM_WARPS = 1", "NUM_WARPS = 4")
    return with_speedup(source, speedup, tag)


TORCH_FALLBACK = '''# atrex-test-speedup: 6.0
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x, weight):
        staged = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, staged, x.numel(), BLOCK=1024)
        xf = staged.float()
        inv_rms = torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv_rms * weight.float()).to(x.dtype)
'''


def output_cache() -> str:
    """Correct on fresh tensors, but caches the output keyed on the input buffers."""
    model = "class Model(torch.nn.Module):"
    source = NAIVE_RMSNORM.replace(model, "_CACHE = {}\n\n\n" + model)
    forward = "    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:\n"
    source = source.replace(forward + """        x2 = x.reshape(-1, x.shape[-1])""", forward + """
        key = (x.data_ptr(), weight.data_ptr(), tuple(x.shape))
        if key in _CACHE:
            return _CACHE[key][0]
        y = self._compute(x, weight)
        _CACHE[key] = (y, x, weight)  # keeps the inputs alive so their addresses stay unique
        return y

    def _compute(self, x, weight):
        x2 = x.reshape(-1, x.shape[-1])""")
    return with_speedup(source, 8.0)
