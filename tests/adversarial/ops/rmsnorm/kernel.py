# atrex-test: op=rmsnorm expected=pass
import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * stride_y + cols, x * inv_rms * w, mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.shape[-1] != weight.shape[0]:
        raise ValueError(f"hidden size {x.shape[-1]} != weight size {weight.shape[0]}")
    x2 = x.reshape(-1, x.shape[-1])
    y = torch.empty_like(x2)
    _rmsnorm_kernel[(x2.shape[0],)](x2, weight, y, x2.shape[1], x2.stride(0), y.stride(0), eps,
                                    BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view_as(x)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, weight, self.eps)
