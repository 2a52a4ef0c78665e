"""A correct Triton RMSNorm shared by the cheating candidates (each copies this beside itself)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + cols, x * inv * w, mask=mask)


def rms_into(x: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    _rms_kernel[(x.shape[0],)](x, weight, y, x.shape[1], eps,
                               BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_into(x, weight, torch.empty_like(x), eps)
