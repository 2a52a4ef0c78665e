"""FP8 block-scaled GEMM (DeepSeek-V3 layout: 1x128 activation scales, 128x128 weight scales).

Compute-bound at M 4096 x N 7168 x K 2048 (120 GFLOP of fp8, ~60 us at the fp8 peak). Design, as
in vLLM/SGLang's Triton `w8a8_block_fp8_matmul`:
- BLOCK_K = 128 = the scale group, so each K step is one fp8 tensor-core dot (fp32 result) that is
  scaled by a_scale[row, kb] * b_scale[col_block, kb] and added to the fp32 accumulator. This also
  promotes the partial sums out of the fp8 MMA's limited-precision accumulator every 128 products
  (the issue DeepSeek-V3 reports for Hopper's fp8 MMA);
- 128 x 128 output tiles: one weight-scale block per tile column (a scalar per K step);
- both operands K-major (b is [N, K]), as Hopper's fp8 wgmma requires; 3 stages (96 KB smem).
Variants, chosen by constant: a wider BLOCK_N (the weight scale then varies across the tile:
one scale per 128 columns; slower), PERSISTENT programs (one per SM, tiles in grouped order), and
USE_TMA (a and b through tensor descriptors made on the device). Measured on the H200: 208.5 us,
0.291 of the fp8 peak, one tile per program (`atrex bench`); persistent with TMA 187.6 us (the
sweep at 3fd0026), still 1.67x cuBLASLt's block-scaled GEMM (NOTES.md).
"""

import torch
import triton
import triton.language as tl

# Launch constants (module level so the agent's autotuner and the sweep can search them).
# Round 1 on the H200 (results/h200-gemm/sweep-3fd0026), 4096x7168x2048: persistent with tensor
# descriptors, 128x128, 8 warps, 3 stages 187.6 us a call (one tile per program without TMA
# 210.0; 128x256 tiles 273-313); cuBLASLt's block-scaled FP8 GEMM (torch._scaled_mm, the library
# peer) 112.5. Rounds 2 and 3 ran on an H100 only, where those constants took 189.6 us (the two
# cards agree within 1% on this compute-bound shape): 64-row tiles on one warpgroup with
# SCALE_PRODUCT, two persistent programs per SM, 144.2 us (results/h100-5acabec; 3 per SM 148.8,
# 4 stages 146.3, 128x128 flattened 154.9; cuBLASLt 111.6).
BLOCK_M = 64
BLOCK_N = 128  # a multiple of the 128-column weight-scale block
GROUP_M = 8
NUM_WARPS = 4
NUM_STAGES = 3
PERSISTENT = True
USE_TMA = True
PROGRAMS_PER_SM = 2  # persistent grid: this many programs per SM
# SCALE_PRODUCT multiplies each K step's dot by one per-row product sa * sb (the tile lies in one
# weight-scale block, so sb is one scalar load) instead of by two broadcast vectors. ptxas
# (sm_90a, Triton 3.9) at 128x128, 8 warps: 211 registers one tile per program, 155 with
# SCALE_PRODUCT (no [128, 128] scale tile), 255 persistent either way; at 64x128 on 4 warps,
# persistent: 163. DEFER_SCALE (step k's dot issued before step k - 1's result was scaled, 222
# registers) lost on an H100 in every pairing (164.2 against 191.4 us at 128x128 persistent,
# 196.1 against 234.3 at 64x128; results/h100-5acabec) and is gone.
SCALE_PRODUCT = True
# RESCALE: the accumulator holds the running sum divided by the current K group's scale, so each
# step is one rescale of it (by the previous group's scale over this one's) and one dot into it:
# no second [BLOCK_M, BLOCK_N] fp32 tile for the group's partial product. ptxas (Triton 3.9,
# sm_90a): 121 registers at 128x128 on 8 warps, so two 128-row programs fit an SM. Measured on an
# H100 (results/h100-3738570/fp8, h100-1d14f29/fp8): 137.8 and 138.9 us at 128x128, 8 warps,
# 3 stages, 2 an SM, against 143.8 and 144.7 for the committed constants (cuBLASLt 111.0-111.3);
# at 64x128 it lost (155-158). Off, although 4% faster, because the sum then stays in the wgmma
# accumulator across all K groups, whose fp8 additions keep fewer bits: measured on an H100
# (results/h100-04182cd/fp8err, benchmarks/fp8_accumulation_error.py), the relative L2 error
# against the float64 product is 0.00166 committed (cuBLASLt the same, the bf16 rounding alone
# 0.00166) and 0.00197 with RESCALE at K 2048, 0.00306 at K 7168. The scales must be positive.
RESCALE = False
# FLATTEN: tl.range(flatten=True) on the persistent tile loop: one pipelined loop over every
# tile's K steps, the next tile's loads issued during this tile's last ones (16 K steps a tile
# here, so a per-tile pipeline fill is 1/8 of it at 3 stages). Won at 128x128 on the H100
# (154.9 against 164.2 us), lost at 64 rows (151.9-157.2 against 144.2).
FLATTEN = False


@triton.jit
def _tile_coords(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """Grouped ordering: consecutive tiles walk GROUP_M row tiles of one column band, so the
    band's weight tiles are reused from L2."""
    per_group = GROUP_M * num_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows


@triton.jit
def _k_step(a_rows, b_cols, a_desc, b_desc, m0, n0, kb, K, mmask, nmask,
            BLOCK_K: tl.constexpr, TMA: tl.constexpr):
    """K group kb's operand tiles: a [BLOCK_M, BLOCK_K], b [BLOCK_K, BLOCK_N] (K-major)."""
    if TMA:
        a = a_desc.load([m0, kb * BLOCK_K])
        b = b_desc.load([n0, kb * BLOCK_K]).T  # [BLOCK_K, BLOCK_N], K-major for wgmma
    else:
        rk = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        kmask = rk < K
        a = tl.load(a_rows + rk[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_cols + rk[:, None], mask=kmask[:, None] & nmask[None, :], other=0.0)
    return a, b


@triton.jit
def _scaled(part, sa, sb, PRODUCT: tl.constexpr):
    """A K group's fp32 dot times its row scales sa [BLOCK_M] and column scales sb ([BLOCK_N],
    or one scalar when PRODUCT: the tile lies in one weight-scale block)."""
    if PRODUCT:
        return part * (sa * sb)[:, None]
    else:
        return part * sa[:, None] * sb[None, :]


@triton.jit
def _group_scales(a_scales, b_scales, kb, mmask, nmask, PRODUCT: tl.constexpr):
    """K group kb's row scales [BLOCK_M] and column scales ([BLOCK_N], or a scalar when PRODUCT);
    rows and columns past the edge get 1, so the rescale's ratios stay finite there."""
    sa = tl.load(a_scales + kb, mask=mmask, other=1.0)
    if PRODUCT:
        sb = tl.load(b_scales + kb)
    else:
        sb = tl.load(b_scales + kb, mask=nmask, other=1.0)
    return sa, sb


@triton.jit
def _rescaled_sum(a_rows, b_cols, a_desc, b_desc, a_scales, b_scales, m0, n0, K, mmask, nmask,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  TMA: tl.constexpr, PRODUCT: tl.constexpr):
    """RESCALE: acc / scale(kb) carried across the K groups in the dot's own accumulator,
    acc(kb) = acc(kb - 1) * scale(kb - 1) / scale(kb) + a(kb) @ b(kb); times the last scale at
    the end. Loading the next group's scales a step early lost on an H100 (176.2 against 138.9
    us at 128x128, results/h100-1d14f29/fp8)."""
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    sa_prev, sb_prev = _group_scales(a_scales, b_scales, 0, mmask, nmask, PRODUCT)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        a, b = _k_step(a_rows, b_cols, a_desc, b_desc, m0, n0, kb, K, mmask, nmask, BLOCK_K, TMA)
        sa, sb = _group_scales(a_scales, b_scales, kb, mmask, nmask, PRODUCT)
        if PRODUCT:
            acc = acc * ((sa_prev * sb_prev) / (sa * sb))[:, None]
        else:
            acc = acc * (sa_prev / sa)[:, None] * (sb_prev / sb)[None, :]
        acc = tl.dot(a, b, acc)
        sa_prev = sa
        sb_prev = sb
    return _scaled(acc, sa_prev, sb_prev, PRODUCT)


@triton.jit
def _scaled_tile(a_ptr, as_ptr, b_ptr, bs_ptr, a_desc, b_desc, m0, n0, M, N, K, stride_am,
                 stride_asm, stride_bn, stride_bsn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, SCALE_N: tl.constexpr, TMA: tl.constexpr,
                 PRODUCT: tl.constexpr, RESCALE: tl.constexpr):
    """The fp32 tile at (m0, n0): per K group, one fp8 dot scaled by its row and column scales."""
    rm = m0 + tl.arange(0, BLOCK_M)
    rn = n0 + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    a_rows = a_ptr + rm.to(tl.int64)[:, None] * stride_am
    b_cols = b_ptr + rn.to(tl.int64)[None, :] * stride_bn
    a_scales = as_ptr + rm.to(tl.int64) * stride_asm
    if PRODUCT:  # BLOCK_N <= SCALE_N: the whole tile reads one weight-scale row
        b_scales = bs_ptr + (n0 // SCALE_N).to(tl.int64) * stride_bsn
    else:
        b_scales = bs_ptr + (rn // SCALE_N).to(tl.int64) * stride_bsn
    if RESCALE:
        return _rescaled_sum(a_rows, b_cols, a_desc, b_desc, a_scales, b_scales, m0, n0, K,
                             mmask, nmask, BLOCK_M, BLOCK_N, BLOCK_K, TMA, PRODUCT)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        a, b = _k_step(a_rows, b_cols, a_desc, b_desc, m0, n0, kb, K, mmask, nmask, BLOCK_K, TMA)
        sa, sb = _group_scales(a_scales, b_scales, kb, mmask, nmask, PRODUCT)
        acc += _scaled(tl.dot(a, b), sa, sb, PRODUCT)
    return acc


@triton.jit
def _one_tile(tile, num_m, num_n, a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, a_desc, b_desc, M, N, K,
              stride_am, stride_asm, stride_bn, stride_bsn, stride_om, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SCALE_N: tl.constexpr,
              GROUP_M: tl.constexpr, TMA: tl.constexpr, PRODUCT: tl.constexpr,
              RESCALE: tl.constexpr):
    pid_m, pid_n = _tile_coords(tile, num_m, num_n, GROUP_M)
    acc = _scaled_tile(a_ptr, as_ptr, b_ptr, bs_ptr, a_desc, b_desc, pid_m * BLOCK_M,
                       pid_n * BLOCK_N, M, N, K, stride_am, stride_asm, stride_bn, stride_bsn,
                       BLOCK_M, BLOCK_N, BLOCK_K, SCALE_N, TMA, PRODUCT, RESCALE)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])


@triton.jit
def _fp8_block_gemm_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M, N, K,
                           stride_am, stride_asm, stride_bn, stride_bsn, stride_om,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           SCALE_N: tl.constexpr, GROUP_M: tl.constexpr, TMA: tl.constexpr,
                           PERSISTENT: tl.constexpr, PRODUCT: tl.constexpr,
                           RESCALE: tl.constexpr, FLATTEN: tl.constexpr):
    """One output tile per program, or (PERSISTENT) programs that walk the tiles in grouped
    order, a grid-stride apart."""
    if TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        a_desc = None
        b_desc = None
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    if PERSISTENT:
        for tile in tl.range(tl.program_id(0), num_m * num_n, tl.num_programs(0),
                             flatten=FLATTEN):
            _one_tile(tile, num_m, num_n, a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, a_desc, b_desc,
                      M, N, K, stride_am, stride_asm, stride_bn, stride_bsn, stride_om, BLOCK_M,
                      BLOCK_N, BLOCK_K, SCALE_N, GROUP_M, TMA, PRODUCT, RESCALE)
    else:
        _one_tile(tl.program_id(0), num_m, num_n, a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, a_desc,
                  b_desc, M, N, K, stride_am, stride_asm, stride_bn, stride_bsn, stride_om,
                  BLOCK_M, BLOCK_N, BLOCK_K, SCALE_N, GROUP_M, TMA, PRODUCT, RESCALE)


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory where device-side tensor descriptors are written (Triton asks for it)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 3  # CPU tests: several tiles per program


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
    if BLOCK_N % block_n and block_n % BLOCK_N:
        raise ValueError(f"BLOCK_N {BLOCK_N} and the scale block {block_n} must nest")
    tma = USE_TMA and k % 16 == 0  # descriptor row strides: multiples of 16 bytes
    if tma and a.is_cuda:
        triton.set_allocator(_descriptor_scratch)
    tiles = triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N)
    grid = (min(tiles, _num_sms(a.device) * PROGRAMS_PER_SM) if PERSISTENT else tiles,)
    _fp8_block_gemm_kernel[grid](a, a_scale, b, b_scale, out, m, n, k, a.stride(0),
                                 a_scale.stride(0), b.stride(0), b_scale.stride(0), out.stride(0),
                                 BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=block_k,
                                 SCALE_N=block_n, GROUP_M=GROUP_M, TMA=tma, PERSISTENT=PERSISTENT,
                                 PRODUCT=SCALE_PRODUCT and BLOCK_N <= block_n, RESCALE=RESCALE,
                                 FLATTEN=FLATTEN, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return out


class Model(torch.nn.Module):
    def __init__(self, block_n: int = 128, block_k: int = 128) -> None:
        super().__init__()
        self.block_n, self.block_k = int(block_n), int(block_k)

    def forward(self, a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor,
                b_scale: torch.Tensor) -> torch.Tensor:
        return fp8_block_gemm(a, a_scale, b, b_scale, self.block_n, self.block_k)
