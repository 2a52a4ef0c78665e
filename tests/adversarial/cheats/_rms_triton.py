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


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, also_a_ptr, also_b_ptr, n, BLOCK: tl.constexpr):
    # a token step: copies (and casts) src into dst; the two extra pointers are passed, not read
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(src_ptr + offs, mask=mask)
    tl.store(dst_ptr + offs, value.to(dst_ptr.dtype.element_ty), mask=mask)


def token_copy(src: torch.Tensor, dst: torch.Tensor, *also: torch.Tensor) -> torch.Tensor:
    """dst <- src through an own Triton kernel that also receives `also` (the op's inputs)."""
    extra = list(also) + [src] * (2 - len(also))
    n = dst.numel()
    _copy_kernel[(triton.cdiv(n, 256),)](src, dst, extra[0], extra[1], n, BLOCK=256)
    return dst


def torch_rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
