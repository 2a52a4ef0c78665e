# atrex-test: op=rmsnorm expected=pass
"""Honest, autotuned: two configurations benchmarked on the first call of each row width."""
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=2), triton.Config({}, num_warps=4)],
                 key=["n_cols"])
@triton.jit
def _rms_autotuned(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + cols, x * inv * w, mask=mask)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        y = torch.empty_like(x)
        _rms_autotuned[(x.shape[0],)](x, weight, y, x.shape[1], self.eps,
                                      BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
