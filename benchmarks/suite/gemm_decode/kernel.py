"""Decode GEMM (M = 64): stream the weight once at HBM bandwidth, split-K for parallelism.

At M = 64 a bf16 GEMM does 64 FLOPs per weight byte, far below the H200 ridge (~206 FLOP/B), so
the time is the time to read the weight once. The kernel is built around that:
- one program owns ALL M rows of an output tile [BLOCK_M >= M, BLOCK_N], so every weight element
  is loaded exactly once (no re-read across M tiles); x is tiny (64 x K) and comes from L2;
- weight tiles are [BLOCK_K, BLOCK_N] with K contiguous, fully coalesced rows, pipelined;
- deep mode, when the output tiles fit one program per SM (down: 128 tiles of 32 columns): one
  program per SM with an 8-stage pipeline of 128-wide K steps (192 KB in flight), cuBLAS's own
  shape of decode kernel; a shape whose 32-column tiles do not fit (qkv: 192) takes the narrowest
  tile width, a multiple of 8, whose count does (qkv: 128 tiles of 48 columns, DEEP_BALANCE);
- otherwise K is split so that the grid is about PROGRAMS_PER_SM programs per SM in ONE wave
  (wave quantization matters more than anything else here: 1.1 waves would cost ~45%). Each
  split writes an fp32 partial [M, N] (L2-resident: 4-8 MB) and a small kernel sums the splits
  in a fixed order (deterministic, no atomics, no memset);
- tensor cores via tl.dot, fp32 accumulation.
Measured on the H200 (`atrex bench`, results/h200-0bfa714): 0.585 (N 6144, K 4096: 18.4 us in a
graph) and 0.754 (N 4096, K 14336: 33.1 us, deep mode) of the datasheet bandwidth, cuBLAS 0.681
/ 0.705; the first version took 0.535 / 0.465. Variants, neither faster over both shapes in the
sweep at 3fd0026:
USE_TMA (x and weight tiles through tensor descriptors: one bulk copy per tile, no per-thread
addresses), FUSED_REDUCE (the split that finishes an output tile last sums the splits' partials
from L2 in split order and writes bf16: no second kernel, same bits as the sum kernel; with
BLOCK_N 32 the fastest on N6144 alone, 23.2 us, and 41.6 us on N4096).
"""

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner can search them). Round 1 on the H200
# (results/h200-gemm/sweep-3fd0026), without PDL: BLOCK_N 64, 3 stages, the least time over both
# shapes, 24.1 us (qkv, N6144 K4096) + 38.8 us (down, N4096 K14336); cuBLAS 18.1 and 36.7. Round 2
# (PDL, deeper pipelines) ran on an H100 only (results/h100-sweeps-9845867): BLOCK_N 32, 4 stages
# and PDL took 24.0 + 48.0 us against 28.2 + 50.9 for round 1's constants (cuBLAS 21.9 + 47.2 on
# that card), the fastest on both shapes; adopted until an H200 sweep says otherwise.
BLOCK_N = 32
BLOCK_K = 128
NUM_WARPS = 4
NUM_STAGES = 4
PROGRAMS_PER_SM = 2  # split-K target: this many resident programs per SM, one wave
USE_TMA = False
FUSED_REDUCE = False
# Programmatic dependent launch (sm_90+): the split-sum kernel is launched while the GEMM drains
# and the GEMM while the work before it drains, each waiting (griddepcontrol.wait) before its first
# load; the launch gaps the events include (qkv 24.1 us with events, 19.5 in a graph) overlap
# the kernel before instead of following it.
PDL = True
# Deep mode, when the output tiles fit one program per SM (down: 128 tiles of 32 columns for
# 132 SMs): one program per SM, K split only as far as that grid needs (down: not at all), each
# streaming its K range through a deep pipeline, the shape of cuBLAS's own decode kernel (ncu:
# one 384-thread CTA per SM, 15 K steps of 64 in flight). On the H200 (results/h200-baac206/
# decode) down took 33.28 us at 8 stages of 128 (192 KB of shared memory), 34.11 at 6, 43.4 at
# 8-16 stages of 64, against 37.47 with two programs per SM splitting K in two and cuBLAS's
# 36.35; on an H100 (results/h100-6c092d8/decode, stages of 64 only) 12 x 64 took 46.22 against
# 47.54. qkv's 192 tiles do not fit and keep PROGRAMS_PER_SM. 0 stages turns deep mode off.
DEEP_STAGES = 8
DEEP_BLOCK_K = 128
# A widened deep tile's stages are cut to DEEP_SMEM_BYTES (qkv: 6 of [64 + 64, 128] bf16; down's
# committed 8 stages of 32 columns are exactly 192 KB).
DEEP_SMEM_BYTES = 192 * 1024
DEEP_MAX_BLOCK_N = 128
# DEEP_BALANCE: a shape whose tiles do not fit one per SM takes the narrowest tile width (a
# multiple of 8) whose count does, computed on a power-of-two block with the columns past it
# masked (no bytes move for them): qkv gets 128 programs of 48 columns on 132 SMs, each streaming
# 384 KB, where the split plan gives 60 SMs two programs of 256 KB (512 KB) and 72 SMs one, and
# doubling the width until the tiles fit (DEEP_WIDEN, removed: 96 programs of 64 columns, 512 KB,
# 36 SMs idle; 23.14 against 22.78 us on an H100, results/h100-f6fa910) idled SMs. On an H100
# (results/h100-1edce42, round 8, CUDA events after an L2 flush) qkv took 22.18 us against 22.75
# with the split plan (torch.mm 22.00, the library peer 22.08 in the same sweep); down, which
# already fits, 45.22 against 45.36. The H200 ran qkv at 18.5 us with the split plan against
# cuBLAS's 15.8 (results/h200-111e927); the balanced plan is not yet timed there.
DEEP_BALANCE = True
# DEEP_SPLIT = S > 1: deep tiles S times wider with K split S ways, still one program per SM (qkv:
# 64 tiles of 96 columns in 128-column blocks, two K halves; down: 64 tiles of 64 columns, two K
# halves, or 32 of 128 in four), the partials summed by the split-sum kernel. Every program
# reads x over its whole K range, so x's L2 reads are n_tiles x 64 x K x 2 bytes: down's 128
# tiles read 235 MB of x from L2 for 117 MB of weight from HBM. On the H200 down took 33.1 us
# (results/h200-0bfa714): 2.75 MB into each of 128 SMs, 10.6 TB/s from L2 to the SMs, where the
# H100 at the same plan moved 7.8 TB/s (45.2 us, weight at 78% of its HBM peak). Wider tiles
# cut x's share: at S = 2 each SM takes 1.8 MB for the same weight bytes. cuBLAS's decode
# kernels pair CTAs in clusters (ncu: nvjet ..._2x1, results/h100-812c680/ncu), which lets one
# x load feed two tiles. On an H100 (results/h100-3979ade/sweep-gemm_decode, one draw, events
# after an L2 flush, us) it is right and slower: qkv 21.5 at S = 1, 24.6 at 2 (at 4 its tiles
# pass DEEP_MAX_BLOCK_N: the split-K plan); down 43.8 / 46.1 / 46.8 at S = 1 / 2 / 4 (cuBLAS 21.3
# and 45.9); 8 warps slower at every S. That card's HBM, not its L2 path, holds down, so only
# the H200 can judge it; 1 (off) until it does.
DEEP_SPLIT = 1


@triton.jit
def _mma(a, b, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b)


@triton.jit
def _skinny_gemm_kernel(x_ptr, w_ptr, out_ptr, ws_ptr, ticket_ptr, M, N, K, k_per_split,
                        stride_xm, stride_wn, stride_om, stride_ws_split, stride_ws_m,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        USE_WORKSPACE: tl.constexpr, TMA: tl.constexpr, FUSED: tl.constexpr,
                        INTERPRET: tl.constexpr, USE_PDL: tl.constexpr,
                        TILE_N: tl.constexpr):
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # launched early: what the stream ran before is visible first
        tl.extra.cuda.gdc_launch_dependents()  # the split sum may be scheduled from now on
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    # a program owns TILE_N <= BLOCK_N columns; the block's columns past them are masked
    rn = pid_n * TILE_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    if TILE_N < BLOCK_N:
        nmask = nmask & (tl.arange(0, BLOCK_N) < TILE_N)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if TMA:  # splits are whole BLOCK_K tiles; the descriptors zero-fill past M, N and K
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
        for k0 in range(k_start, k_end, BLOCK_K):
            a = x_desc.load([pid_m * BLOCK_M, k0])
            b = w_desc.load([pid_n * BLOCK_N, k0])
            acc += _mma(a, b.T, INTERPRET)
    else:
        x_rows = x_ptr + rm.to(tl.int64)[:, None] * stride_xm
        w_cols = w_ptr + rn.to(tl.int64)[None, :] * stride_wn
        for k0 in range(k_start, k_end, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            kmask = rk < k_end
            a = tl.load(x_rows + rk[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)
            b = tl.load(w_cols + rk[:, None], mask=kmask[:, None] & nmask[None, :], other=0.0,
                        eviction_policy="evict_first")  # the weight is streamed once
            acc += _mma(a, b, INTERPRET)
    omask = mmask[:, None] & nmask[None, :]
    out = out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :]
    if USE_WORKSPACE:
        tile = rm.to(tl.int64)[:, None] * stride_ws_m + rn[None, :]
        tl.store(ws_ptr + pid_k * stride_ws_split + tile, acc, mask=omask)
        if FUSED:
            tl.debug_barrier()  # every thread's partial is written before the ticket
            splits = tl.num_programs(1)
            ticket = tl.atomic_add(ticket_ptr + pid_m * tl.num_programs(0) + pid_n, 1,
                                   sem="acq_rel", scope="gpu")
            if ticket == splits - 1:  # the last split of this tile: sum in split order
                total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for s in range(0, splits):
                    total += tl.load(ws_ptr + s * stride_ws_split + tile, mask=omask, other=0.0,
                                     cache_modifier=".cg")
                tl.store(out, total.to(out_ptr.dtype.element_ty), mask=omask)
    else:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=omask)


@triton.jit
def _sum_splits_kernel(ws_ptr, out_ptr, numel, n_splits, stride_split, BLOCK: tl.constexpr,
                       USE_PDL: tl.constexpr):
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # launched early: the GEMM's partials are written first
        tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(0, n_splits):
        acc += tl.load(ws_ptr + s * stride_split + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory where device-side tensor descriptors are written (Triton asks for it)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # CPU runs (interpreter): plan as for an H200


def _use_pdl(device: torch.device) -> bool:
    return (PDL and device.type == "cuda" and not _INTERPRET
            and torch.cuda.get_device_capability(device)[0] >= 9)


class _Plan(NamedTuple):
    block_m: int
    block_n: int  # the power-of-two block a program computes on
    tile_n: int  # the columns it owns (<= block_n; the rest masked)
    block_k: int
    stages: int
    m_tiles: int
    n_tiles: int
    splits: int
    per_split: int  # K blocks per split
    deep: bool


def _balanced_tile_n(columns: int, sms: int) -> int:
    """The narrowest tile width, whole 16-byte rows of bf16 output, whose tiles over `columns`
    (columns x M tiles x K splits) fit `sms` programs."""
    return 8 * triton.cdiv(triton.cdiv(columns, sms), 8)


def _plan(m: int, n: int, k: int, elem_bytes: int, sms: int) -> _Plan:
    """Tiles, pipeline and K split for an [m, k] x [k, n] product on `sms` SMs."""
    block_m = min(64, max(16, triton.next_power_of_2(m)))
    m_tiles = triton.cdiv(m, block_m)
    block_n = BLOCK_N
    deep = DEEP_STAGES > 0 and triton.cdiv(n, block_n) * m_tiles <= sms
    widened = False
    if DEEP_STAGES > 0 and (DEEP_SPLIT > 1 or (DEEP_BALANCE and not deep)):
        tile_n = _balanced_tile_n(n * m_tiles * max(1, DEEP_SPLIT), sms)
        block_n = triton.next_power_of_2(tile_n)
        widened = block_n <= DEEP_MAX_BLOCK_N
        deep = deep or widened
    if not widened:  # the committed width (a widened block past DEEP_MAX_BLOCK_N is no deep tile)
        block_n = tile_n = BLOCK_N
    n_tiles = triton.cdiv(n, tile_n)
    block_k = DEEP_BLOCK_K if deep else BLOCK_K
    stages = DEEP_STAGES if deep else NUM_STAGES
    if widened:  # a wider tile than the constants were chosen for: keep its stages in budget
        stage_bytes = (block_m + block_n) * block_k * elem_bytes
        stages = max(2, min(stages, DEEP_SMEM_BYTES // stage_bytes))
    k_blocks = triton.cdiv(k, block_k)
    # About this many resident programs per SM, all in one wave; every split keeps >= 4 K blocks
    programs_per_sm = 1 if deep else PROGRAMS_PER_SM
    want = max(1, min(programs_per_sm * sms // (n_tiles * m_tiles), k_blocks // 4 or 1))
    per_split = triton.cdiv(k_blocks, want)
    return _Plan(block_m, block_n, tile_n, block_k, stages, m_tiles, n_tiles,
                 triton.cdiv(k_blocks, per_split), per_split, deep)


def skinny_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
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
    plan = _plan(m, n, k, x.element_size(), _num_sms(x.device))
    splits = plan.splits
    ws = (torch.empty((splits, m, n), dtype=torch.float32, device=x.device) if splits > 1
          else out)
    fused = FUSED_REDUCE and splits > 1
    # one ticket per output tile, zeroed every call (a memset in the stream); without the fused
    # reduction no ticket is read, and no memset is launched: ncu on an H100 (results/
    # h100-812c680/ncu) found a one-element fill kernel (2.3 us) before every call's GEMM
    tickets = (torch.zeros(plan.n_tiles * plan.m_tiles, dtype=torch.int32, device=x.device)
               if fused else out)
    # descriptor row strides must be multiples of 16 bytes, and a descriptor block would read a
    # balanced tile's masked columns (pointer loads for those)
    tma = USE_TMA and (k * x.element_size()) % 16 == 0 and plan.tile_n == plan.block_n
    if tma and x.is_cuda:
        triton.set_allocator(_descriptor_scratch)
    pdl = _use_pdl(x.device)
    _skinny_gemm_kernel[(plan.n_tiles, splits, plan.m_tiles)](
        x, weight, out, ws, tickets, m, n, k, plan.per_split * plan.block_k, x.stride(0),
        weight.stride(0), out.stride(0), ws.stride(0) if splits > 1 else 0,
        ws.stride(-2) if splits > 1 else 0, BLOCK_M=plan.block_m, BLOCK_N=plan.block_n,
        BLOCK_K=plan.block_k, USE_WORKSPACE=splits > 1, TMA=tma, FUSED=fused,
        INTERPRET=_INTERPRET, USE_PDL=pdl, TILE_N=plan.tile_n, num_warps=NUM_WARPS,
        num_stages=plan.stages, launch_pdl=pdl)
    if splits > 1 and not fused:
        block = 1024
        _sum_splits_kernel[(triton.cdiv(m * n, block),)](ws, out, m * n, splits, ws.stride(0),
                                                         BLOCK=block, USE_PDL=pdl, num_warps=4,
                                                         launch_pdl=pdl)
    return out


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return skinny_matmul(x, weight)
