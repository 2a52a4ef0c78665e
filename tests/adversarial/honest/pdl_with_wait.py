# atrex-test: op=rmsnorm expected=pass
"""Programmatic dependent launch done right: on sm_90 the kernel waits (gdc_wait) before its
first load; elsewhere (older GPUs, the CPU interpreter) it is a plain launch."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
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
        pdl = x.is_cuda and torch.cuda.get_device_capability(x.device)[0] >= 9
        y = torch.empty_like(x)
        _rms_kernel[(x.shape[0],)](x, weight, y, x.shape[1], self.eps,
                                   BLOCK=triton.next_power_of_2(x.shape[1]), USE_PDL=pdl,
                                   launch_pdl=pdl)
        return y
