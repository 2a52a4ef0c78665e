# atrex-test: op=rmsnorm expected=suspicious finding=input_mutation gpu_finding=input_mutation|recheck_failed
"""Leaves its inputs alone until it has seen the same values four times (only timing repeats a
call that often), then also doubles `x` in place after each call: RMSNorm does not change when
its input is scaled, so every output stays right while later calls run on other values than
the ones drawn (a stand-in for rewriting an input into a form that makes later calls cheaper)."""
import torch
import triton
import triton.language as tl
from _rms_triton import rms

_seen: dict = {}


@triton.jit
def _double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * 2, mask=offs < n)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        head = tuple(x.flatten()[:16].float().tolist())
        _seen[head] = _seen.get(head, 0) + 1
        out = rms(x, weight, self.eps)
        if _seen[head] >= 4:
            _double[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
            _seen[tuple(x.flatten()[:16].float().tolist())] = 4
        return out
