"""Prefill GEMM out = x @ weight^T (bf16, fp32 accumulation) for Hopper.

Compute-bound (M 8192 x N 28672 x K 4096: ~1.9 TFLOP, ~0.5 GB), so the goal is tensor-core
throughput, not bytes: 128 x 256 output tiles (8 warps, two warpgroups of wgmma), BLOCK_K 64 with
3 pipeline stages (~144 KB of smem), and grouped tile ordering (GROUP_M row tiles share the same
weight columns while they are in L2). The weight is [N, K] (nn.Linear layout) and is read
K-major, which wgmma takes directly. Variants, chosen by constant:
- PERSISTENT: one program per SM (NUM_SMS programs) walks the tiles in grouped order: no launch
  of 7,000 programs, and the next tile's loads start while the last tile's epilogue runs;
- USE_TMA: x, weight and out move through tensor descriptors made on the device (TMA: one
  instruction per tile, no address registers, hardware bounds: the ragged edges load zeros and
  stores stop at the matrix's end);
- EPILOGUE_SUBTILE: the output tile leaves as two [BLOCK_M, BLOCK_N / 2] halves (less shared
  memory and fewer live registers in the epilogue);
- WARP_SPECIALIZE: the persistent loop's tl.range(warp_specialize=True) (a producer warp for
  the loads; whether Triton 3.6 builds it on Hopper is for the sweep to find out).
Measured on the H200: the one-tile-per-program kernel 3793.6 us (`atrex bench`, 0.513 of the
bf16 peak; cuBLAS 2487.3 us); the sweep at 3fd0026 chose PERSISTENT + USE_TMA (the constants
below say by how much); warp specialization builds on Hopper under Triton 3.6 and ties.
"""

import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner and the sweep can search them).
# Chosen by benchmarks/gemm_h200.py, 8192x28672x4096: persistent with tensor descriptors, 128x256
# tiles, 3 stages. On the H200 (results/h200-gemm/sweep-3fd0026) 2694.7 us a call, 128x128 with
# 4 stages 2690.6 (the same within 0.2%), cuBLAS through torch.mm 2662.3; the one-tile-per-program
# kernel 3218-3587 us, without TMA 3233. On an H100 (results/h100-sweeps-9845867) 128x256 took
# 2464.8 us and 128x128 2978.1 (cuBLAS 2684.7), so the wide tile is kept for both cards.
BLOCK_M = 128
BLOCK_N = 256
BLOCK_K = 64
# GROUP_M: row tiles per column band of the grouped order. An H100 sweep (results/h100-f6fa910/gemm)
# timed 4 / 8 / 16 at 2701.3 / 2679.3 / 2639.2 us (cuBLAS 2623.0): taller bands keep fewer weight
# column bands live in L2. One sweep on one card, so the H200 bench decides whether it holds.
GROUP_M = 16
NUM_WARPS = 8
NUM_STAGES = 3
PERSISTENT = True
USE_TMA = True
EPILOGUE_SUBTILE = False
WARP_SPECIALIZE = False  # persistent only
PROGRAMS_PER_SM = 1  # persistent grid: this many programs per SM
# FLATTEN: tl.range(flatten=True) on the persistent tile loop; Triton fuses it with the K loop,
# so the next tile's first loads are issued during this tile's last steps and the epilogue
# runs inside the pipelined loop (TTGIR: one scf.for, the store under an scf.if). Not timed.
FLATTEN = False


@triton.jit
def _mma(a, b, acc, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc)


@triton.jit
def _tile_coords(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """Grouped ordering: consecutive tiles walk GROUP_M row tiles of one column band, so the
    band's weight tiles are reused from L2."""
    per_group = GROUP_M * num_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows


@triton.jit
def _tile_product(x_ptr, w_ptr, x_desc, w_desc, m0, n0, M, N, K, stride_xm, stride_wn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  TMA: tl.constexpr, INTERPRET: tl.constexpr):
    """The fp32 [BLOCK_M, BLOCK_N] tile of x @ weight^T at (m0, n0)."""
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if TMA:
        for k0 in range(0, K, BLOCK_K):
            a = x_desc.load([m0, k0])
            b = w_desc.load([n0, k0])  # [BLOCK_N, BLOCK_K], K-major: wgmma reads it transposed
            acc = _mma(a, b.T, acc, INTERPRET)
    else:
        rm = m0 + tl.arange(0, BLOCK_M)
        rn = n0 + tl.arange(0, BLOCK_N)
        x_rows = x_ptr + rm.to(tl.int64)[:, None] * stride_xm
        w_cols = w_ptr + rn.to(tl.int64)[None, :] * stride_wn
        for k0 in range(0, K, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            kmask = rk < K
            a = tl.load(x_rows + rk[None, :], mask=(rm < M)[:, None] & kmask[None, :], other=0.0)
            b = tl.load(w_cols + rk[:, None], mask=kmask[:, None] & (rn < N)[None, :], other=0.0)
            acc = _mma(a, b, acc, INTERPRET)
    return acc


@triton.jit
def _store_tile(out_ptr, o_desc, acc, m0, n0, M, N, stride_om, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, TMA: tl.constexpr, SUBTILE: tl.constexpr):
    out = acc.to(out_ptr.dtype.element_ty)
    if TMA:
        if SUBTILE:
            halves = tl.reshape(out, [BLOCK_M, 2, BLOCK_N // 2]).permute(0, 2, 1)
            left, right = tl.split(halves)
            o_desc.store([m0, n0], left)
            o_desc.store([m0, n0 + BLOCK_N // 2], right)
        else:
            o_desc.store([m0, n0], out)
    else:
        rm = m0 + tl.arange(0, BLOCK_M)
        rn = n0 + tl.arange(0, BLOCK_N)
        tl.store(out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :], out,
                 mask=(rm < M)[:, None] & (rn < N)[None, :])


@triton.jit
def _descriptors(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 SUBTILE: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[stride_om, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // 2 if SUBTILE
                                                    else BLOCK_N])
    return x_desc, w_desc, o_desc


@triton.jit
def _one_tile(tile, num_m, num_n, x_ptr, w_ptr, out_ptr, x_desc, w_desc, o_desc, M, N, K,
              stride_xm, stride_wn, stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, TMA: tl.constexpr,
              SUBTILE: tl.constexpr, INTERPRET: tl.constexpr):
    pid_m, pid_n = _tile_coords(tile, num_m, num_n, GROUP_M)
    acc = _tile_product(x_ptr, w_ptr, x_desc, w_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, K,
                        stride_xm, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K, TMA, INTERPRET)
    _store_tile(out_ptr, o_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_om, BLOCK_M,
                BLOCK_N, TMA, SUBTILE)


@triton.jit
def _matmul_nt_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, TMA: tl.constexpr, SUBTILE: tl.constexpr,
                      PERSISTENT: tl.constexpr, WS: tl.constexpr, FLATTEN: tl.constexpr,
                      INTERPRET: tl.constexpr):
    """One output tile per program, or (PERSISTENT) programs that walk the tiles in grouped
    order, a grid-stride apart."""
    if TMA:
        x_desc, w_desc, o_desc = _descriptors(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm,
                                              stride_wn, stride_om, BLOCK_M, BLOCK_N, BLOCK_K,
                                              SUBTILE)
    else:
        x_desc = None
        w_desc = None
        o_desc = None
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    if not PERSISTENT:
        _one_tile(tl.program_id(0), num_m, num_n, x_ptr, w_ptr, out_ptr, x_desc, w_desc, o_desc,
                  M, N, K, stride_xm, stride_wn, stride_om, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                  TMA, SUBTILE, INTERPRET)
    elif WS:  # a separate loop: warp_specialize is only passed where it is asked for
        for tile in tl.range(tl.program_id(0), num_m * num_n, tl.num_programs(0),
                             warp_specialize=True):
            _one_tile(tile, num_m, num_n, x_ptr, w_ptr, out_ptr, x_desc, w_desc, o_desc, M, N, K,
                      stride_xm, stride_wn, stride_om, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, TMA,
                      SUBTILE, INTERPRET)
    else:
        for tile in tl.range(tl.program_id(0), num_m * num_n, tl.num_programs(0),
                             flatten=FLATTEN):
            _one_tile(tile, num_m, num_n, x_ptr, w_ptr, out_ptr, x_desc, w_desc, o_desc, M, N, K,
                      stride_xm, stride_wn, stride_om, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, TMA,
                      SUBTILE, INTERPRET)


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory where device-side tensor descriptors are written (Triton asks for it)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 3  # CPU tests: several tiles per program


def matmul_nt(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"x {tuple(x.shape)} and weight {tuple(weight.shape)} do not match")
    if x.stride(-1) != 1:
        x = x.contiguous()
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    # descriptor row strides must be multiples of 16 bytes
    tma = USE_TMA and (k * x.element_size()) % 16 == 0 and (n * out.element_size()) % 16 == 0
    if tma and x.is_cuda:
        triton.set_allocator(_descriptor_scratch)
    args = (x, weight, out, m, n, k, x.stride(0), weight.stride(0), out.stride(0))
    tiles = triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N)
    grid = (min(tiles, _num_sms(x.device) * PROGRAMS_PER_SM) if PERSISTENT else tiles,)
    _matmul_nt_kernel[grid](
        *args, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, TMA=tma,
        SUBTILE=EPILOGUE_SUBTILE, PERSISTENT=PERSISTENT, WS=WARP_SPECIALIZE and PERSISTENT,
        FLATTEN=FLATTEN, INTERPRET=_INTERPRET, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return out


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return matmul_nt(x, weight)
