# atrex-test: op=rmsnorm expected=suspicious finding=unsynced_pdl gpu=yes
"""Launched with programmatic dependent launch but never waits for the kernel before it: in a
graph of back-to-back calls each call starts before the previous one has finished (and in a model
it would read inputs still being written)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    tl.extra.cuda.gdc_launch_dependents()  # lets the next call start at once; no gdc_wait()
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
        _rms_kernel[(x.shape[0],)](x, weight, y, x.shape[1], self.eps,
                                   BLOCK=triton.next_power_of_2(x.shape[1]), launch_pdl=True)
        return y
