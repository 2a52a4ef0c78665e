# atrex-test: op=linear expected=pass
"""An honest Triton matmul: y = x @ weight^T, fp32 accumulation."""
import os

import torch
import triton
import triton.language as tl

# Triton 3.9's CPU interpreter multiplies bf16 tiles wrongly in tl.dot; upcasting there keeps the
# CPU check meaningful while the GPU path keeps bf16 tensor-core operands.
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, UPCAST: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + k0 + rk[None, :],
                    mask=(rm[:, None] < M) & (k0 + rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k0 + rk[:, None],
                    mask=(rn[None, :] < N) & (k0 + rk[:, None] < K), other=0.0)
        if UPCAST:
            acc += tl.dot(x.to(tl.float32), w.to(tl.float32))
        else:
            acc += tl.dot(x, w)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, 64), triton.cdiv(n, 64))
    _linear_kernel[grid](x.contiguous(), weight.contiguous(), y, m, n, k, BLOCK_M=64,
                         BLOCK_N=64, BLOCK_K=32, UPCAST=_INTERPRET)
    return y


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return linear(x, weight)
