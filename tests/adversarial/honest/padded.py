# atrex-test: op=rmsnorm expected=pass
"""Honest, padded: rows padded with zeros to a power of two in PyTorch (layout glue), one
unmasked kernel over the padded rows, the padding sliced off again."""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _rms_padded(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * BLOCK + cols).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * BLOCK + cols, x * inv * w)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        width = triton.next_power_of_2(x.shape[1])
        xp = F.pad(x, (0, width - x.shape[1]))
        wp = F.pad(weight, (0, width - weight.shape[0]))
        y = torch.empty_like(xp)
        _rms_padded[(x.shape[0],)](xp, wp, y, x.shape[1], self.eps, BLOCK=width)
        return y[:, : x.shape[1]].contiguous()
