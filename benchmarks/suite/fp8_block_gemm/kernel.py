"""FP8 block-scaled GEMM (DeepSeek-V3 layout: 1x128 activation scales, 128x128 weight scales).

Compute-bound at M 4096 x N 7168 x K 2048 (120 GFLOP of fp8, ~60 us at the fp8 peak). Design, as
in vLLM/SGLang's Triton `w8a8_block_fp8_matmul`:
- BLOCK_K = 128 = the scale group, so each K step is one fp8 tensor-core dot (fp32 result) that is
  scaled by a_scale[row, kb] * b_scale[col_block, kb] and added to the fp32 accumulator. This also
  promotes the partial sums out of the fp8 MMA's limited-precision accumulator every 128 products
  (the issue DeepSeek-V3 reports for Hopper's fp8 MMA);
- 128 x 128 output tiles: one weight-scale block per tile column (a scalar per K step);
- both operands K-major (b is [N, K]), as Hopper's fp8 wgmma requires; 3 stages (96 KB smem).
A correct, reasonable kernel; tiles and stages to be measured on H200.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _fp8_block_gemm_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M, N, K,
                           stride_am, stride_asm, stride_bn, stride_bsn, stride_om,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           SCALE_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    a_rows = a_ptr + rm.to(tl.int64)[:, None] * stride_am
    b_cols = b_ptr + rn.to(tl.int64)[None, :] * stride_bn
    a_scales = as_ptr + rm.to(tl.int64) * stride_asm
    b_scales = bs_ptr + (rn // SCALE_N).to(tl.int64) * stride_bsn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        rk = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        kmask = rk < K
        a = tl.load(a_rows + rk[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_cols + rk[:, None], mask=kmask[:, None] & nmask[None, :], other=0.0)
        sa = tl.load(a_scales + kb, mask=mmask, other=0.0)
        sb = tl.load(b_scales + kb, mask=nmask, other=0.0)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
    out = out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])


def fp8_block_gemm(a, a_scale, b, b_scale, block_n: int = 128, block_k: int = 128):
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} do not match")
    if a_scale.shape != (m, triton.cdiv(k, block_k)):
        raise ValueError(f"a_scale must be [{m}, {triton.cdiv(k, block_k)}]")
    if b_scale.shape != (triton.cdiv(n, block_n), triton.cdiv(k, block_k)):
        raise ValueError(f"b_scale must be [{triton.cdiv(n, block_n)}, {triton.cdiv(k, block_k)}]")
    if block_k != 128 or block_n % 128:
        raise ValueError("this kernel takes 128-wide K groups and 128-multiple N blocks")
    for t in (a, b, a_scale, b_scale):
        if t.stride(-1) != 1:
            raise ValueError("operands and scales must be row-major")
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return out
    bm, bn = 128, 128
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _fp8_block_gemm_kernel[grid](a, a_scale, b, b_scale, out, m, n, k, a.stride(0),
                                 a_scale.stride(0), b.stride(0), b_scale.stride(0), out.stride(0),
                                 BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=block_k, SCALE_N=block_n,
                                 GROUP_M=8, num_warps=8, num_stages=3)
    return out


class Model(torch.nn.Module):
    def __init__(self, block_n: int = 128, block_k: int = 128) -> None:
        super().__init__()
        self.block_n, self.block_k = int(block_n), int(block_k)

    def forward(self, a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor,
                b_scale: torch.Tensor) -> torch.Tensor:
        return fp8_block_gemm(a, a_scale, b, b_scale, self.block_n, self.block_k)
