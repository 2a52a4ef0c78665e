"""Fused MoE (SiLU-and-mul experts, bf16) in Triton, vLLM `fused_moe` structure.

1. Alignment (vLLM's moe_align_block_size): lay the (token, slot) pairs out grouped by expert,
   each expert's run padded to a multiple of BLOCK_M, and record which expert every BLOCK_M
   block belongs to. A program per chunk of pairs: one kernel takes each chunk's expert
   histogram, a second derives every expert's start and the chunk's share of each run from them
   and scatters the chunk's pairs through atomic counters (one launch when a single chunk holds
   all the pairs, as at decode). The order of the pairs within a run varies from run to run; the
   output does not (every pair's rows are computed and summed on their own).
2. Grouped GEMM 1 with the activation fused: a program takes one expert block of BLOCK_M pairs
   (rows of hidden_states gathered by token) and BLOCK_N intermediate columns, accumulates the gate
   and the up projection (at prefill one 2 * BLOCK_N-wide MMA over both weight tiles, split in
   the epilogue; at decode two accumulators over the same x tile) and stores silu(gate) * up as
   bf16 (at prefill through a tensor descriptor) -- the [pairs, 2I] gate_up tensor never exists.
3. Grouped GEMM 2: act rows of the block times w2[e]^T, scaled by the pair's routing weight,
   stored per pair; 4. a small kernel sums each token's top-k pair outputs in a fixed order
   (a pair whose expert id is outside [0, E), e.g. -1 for a remote expert, adds nothing).
BLOCK_M follows the pairs per expert: 16 at decode (64 tokens: ~4 pairs per expert, each expert's
weights are streamed once), up to PREFILL_BLOCK_M at prefill (compute-bound: tensor-core tiles).
Two regimes of launch constants: DECODE_* where an expert block has at most 32 rows (weight
streaming: narrow tiles, deep pipelines), PREFILL_* above (wgmma-sized tiles). Measured on the
H200 with 64 x 64 x 64 tiles in both: 0.464 (T64) and 0.273 (T8192) (`atrex bench`); the
sweep at 3fd0026 chose the constants below (decode 5%, prefill 26% faster). With today's
constants (111e927, results/h200-111e927/bench, every contestant): 0.806 (T64) and 0.550 (T8192).
"""

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner and the sweep can search them).
# Chosen by benchmarks/gemm_h200.py on the H200 (results/h200-gemm/sweep-3fd0026): decode-t64
# 284.4 us a call with 128x128 (N x K) tiles (64x64: 298.9; all 27 variants within 5%);
# prefill-t8192 1618.8 us with 128x128x64 tiles, 8 warps, 3 stages (64x64: 2185.4; 4 stages
# 1689.1). torch._grouped_mm (the library peer) took 511.6 and 3351.0 us in the same run.
# Round 2 (persistent, TMA) ran on an H100 only (results/h100-sweeps-9845867): PERSISTENT with
# TMA_WEIGHTS and BLOCKED_ACT took prefill-t8192 from 1879.3 to 1588.4 us (BLOCKED_X 1655.2,
# without TMA_WEIGHTS 1660.5; torch._grouped_mm 3592.5) and left decode-t64 where it was (401.6
# against 401.4); adopted until an H200 sweep says otherwise.
DECODE_BLOCK_N = 128  # both GEMMs' output columns per program, expert blocks of <= 32 rows
DECODE_BLOCK_K = 128
DECODE_WARPS = 4
DECODE_STAGES = 3
PREFILL_BLOCK_M = 128  # rows per expert block at most
PREFILL_BLOCK_N = 128
PREFILL_BLOCK_K = 64
PREFILL_WARPS = 8
PREFILL_STAGES = 4  # with GATE_UP_FLATTEN off (below): 1428.5 us against 1494.2 at 3
# The prefill down GEMM's own column tile and depth (K = the intermediate size, 768: 12 steps of
# 64). Round 4 (an H100, results/h100-2e6777a/moe): 256 columns, each act tile read half as
# often, took prefill-t8192 from 1373.7 us (128 columns) to 1284.8 (3 stages: 1293.2); decode
# does not use it. The chunked pair sort's atomics gave no mismatch on either shape.
DOWN_BLOCK_N = 256
DOWN_STAGES = 4
# TMA_WEIGHTS: w1 and w2 tiles through
# device-side tensor descriptors, one bulk copy per tile instead of per-thread addresses (what took
# gemm_prefill from 3587 to 2691 us and the prefill attention from 543 to 340 on the H200).
# BLOCKED_ACT: the gate/up GEMM writes act in expert-block order (contiguous rows), so the down
# GEMM reads its A tiles through a descriptor too; only x stays a row gather.
TMA_WEIGHTS = True
BLOCKED_ACT = True
# BLOCKED_X: a copy kernel lays the gathered x rows out in expert-block order first (DeepGEMM's
# contiguous layout; top_k copies of x, 268 MB at T8192), so the gate/up GEMM reads x through a
# descriptor too and no operand is a per-row gather. Lost on the H100 (1655.2 against 1588.4 us).
BLOCKED_X = False
# PERSISTENT: PROGRAMS_PER_SM programs per SM walk the used expert blocks' tiles, the tile loop
# flattened into the K loop (tl.range flatten), as gemm_prefill's persistent kernel, which took it
# from 3587 to 2691 us with TMA. PROGRAMS_PER_SM may be a fraction (fewer programs than SMs:
# the CPU tests' many tiles a program).
PERSISTENT = True
PROGRAMS_PER_SM = 1
# GATE_UP_FLATTEN, the persistent gate/up loop flattened into its K loop (as above). Off: ptxas
# (sm_90a) under the device's Triton 3.6 reports that the flattened prefill gate/up kernel's wgmma
# instructions "are serialized due to non wgmma instructions defining accumulator registers"
# (C7515: its two accumulators are zeroed per tile inside the fused loop; passing them to tl.dot
# does not change it); unflattened it is clean (255 registers). Timed on an H100
# (results/h100-f6fa910/gemm, round 3): prefill-t8192 1587.2 us flattened at 3 stages (the
# committed kernel until then), 1551.7 at 4; 1494.2 unflattened at 3, 1428.5 at 4 (-10%);
# torch._grouped_mm 3592.0. decode-t64 401.8-402.4 us in all four.
GATE_UP_FLATTEN = False
# GATE_UP_ONE_DOT (prefill, with TMA_WEIGHTS): a K step loads the gate and up tiles as one
# [2, BLOCK_N, BLOCK_K] block of w1 seen as [2E, I, H] and issues one 2*BLOCK_N-wide MMA, the
# [BLOCK_M, 2*BLOCK_N] result split into gate and up in the epilogue. Two 128-wide MMAs read the
# same x tile twice from shared memory; gemm_prefill's 256-column tile was 15% faster than its
# 128-column one (results/h100-sweeps-9845867/gemm). ptxas (sm_90a, Triton 3.6, prefill-t8192):
# 4 m64n256k16 wgmma and 4 3-D bulk copies in the loop instead of 8 m64n128k16 and 8 copies, 255
# registers, no spills, 192 KB of shared memory at 4 stages (as before); the epilogue's split
# needs no shared-memory round trip. Round 5 on an H100 (results/h100-bd02d17/moe): prefill-t8192
# 1280.1 -> 1262.0 us at 4 stages (3 stages: 1300.7 -> 1266.1); ncu: gate/up 751.9 -> 716.3 us,
# SM throughput 67.6% -> 71.4%. Decode does not use it (406.6-406.8 us in all four).
GATE_UP_ONE_DOT = True
# Round 6 lost (an H100, results/h100-52826d5/moe; its code removed): gate/up tiles of 64 + 64
# columns, two persistent programs per SM at 3 stages (128 registers, 96 KB each, so one
# program's epilogue could overlap the other's MMAs) 1318.2 us, one per SM 1512.2, against
# 1223.6 for the committed 128 + 128 columns in one MMA (1259.2 with two MMAs on that machine).
# ACT_STORE_TMA (prefill, with BLOCKED_ACT): the gate/up GEMM stores its act tile through a
# tensor descriptor: a bulk copy from shared memory that the program does not wait for before
# its next tile's loads and MMAs (Triton 3.6 defers the wait to the next tile's store); the
# pointer store goes from the registers. ptxas (Triton 3.6): 255 -> 185 registers, 224 KB. On an
# H100 (results/h100-7118d00/moe): prefill-t8192 1234.9 -> 1221.2 us; the H200 bench with it
# 1135.6 us, 0.550 (results/h200-111e927/bench). The down GEMM's pair rows the same way (in
# expert-block order, the top-k sum gathering each pair's row by its place from the sort; 64 KB
# of store buffer, so 3 stages at 256 columns) measured level there, 1234.8 us alone and 1222.5
# with this, and was removed.
ACT_STORE_TMA = True
# Alignment: programs of ALIGN_BLOCK pairs a step, at most ALIGN_PROGRAMS of them (each reads
# every program's histogram row, so their number is capped; a program takes several steps).
ALIGN_BLOCK = 1024
ALIGN_PROGRAMS = 128
ALIGN_WARPS = 4


@triton.jit
def _mma(a, b, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b)


@triton.jit
def _histogram(ids_ptr, lo, hi, n_experts, E_PAD: tl.constexpr, BLOCK: tl.constexpr):
    """Pairs lo..hi per expert; an id outside [0, n_experts) counts for none."""
    h = tl.zeros([E_PAD], tl.int32)
    for i0 in range(lo, hi, BLOCK):
        offs = i0 + tl.arange(0, BLOCK)
        ids = tl.load(ids_ptr + offs, mask=offs < hi, other=-1).to(tl.int32)
        h += tl.histogram(ids, E_PAD, mask=(ids >= 0) & (ids < n_experts))
    return h


@triton.jit
def _chunk_histogram_kernel(ids_ptr, hist_ptr, n_pairs, chunk, n_experts, E_PAD: tl.constexpr,
                            BLOCK: tl.constexpr):
    """hist[c, e] = pairs of chunk c (pairs [c * chunk, (c + 1) * chunk)) routed to expert e."""
    c = tl.program_id(0)
    h = _histogram(ids_ptr, c * chunk, tl.minimum(c * chunk + chunk, n_pairs), n_experts, E_PAD,
                   BLOCK)
    ex = tl.arange(0, E_PAD)
    tl.store(hist_ptr + c * n_experts + ex, h, mask=ex < n_experts)


@triton.jit
def _align_scatter_kernel(ids_ptr, hist_ptr, sorted_ptr, block_expert_ptr, counts_ptr, n_pairs,
                          chunk, n_chunks, n_experts, BLOCK_M: tl.constexpr, E_PAD: tl.constexpr,
                          BLOCK: tl.constexpr, ROWS: tl.constexpr, BLOCKS: tl.constexpr):
    """Program c: every expert's padded start from the chunk histograms (hist rows 0..n_chunks;
    with one chunk it takes the histogram itself), then chunk c's pairs into their places
    (hist row n_chunks + c: its next free place per expert), then its share of the blocks'
    experts and padding."""
    c = tl.program_id(0)
    base_ptr = hist_ptr + (n_chunks + c) * n_experts
    ex = tl.arange(0, E_PAD)
    before = tl.zeros([E_PAD], tl.int32)  # expert e's pairs in the chunks before c
    if n_chunks == 1:
        counts = _histogram(ids_ptr, 0, n_pairs, n_experts, E_PAD, BLOCK)
    else:
        counts = tl.zeros([E_PAD], tl.int32)
        for r0 in range(0, n_chunks, ROWS):
            rows = r0 + tl.arange(0, ROWS)
            h = tl.load(hist_ptr + rows[:, None] * n_experts + ex[None, :],
                        mask=(rows < n_chunks)[:, None] & (ex < n_experts)[None, :], other=0)
            counts += tl.sum(h, axis=0)
            before += tl.sum(tl.where((rows < c)[:, None], h, 0), axis=0)
    blocks = tl.cdiv(counts, BLOCK_M)
    padded = blocks * BLOCK_M
    starts = tl.cumsum(padded, axis=0) - padded
    # the pairs take their places in any order within an expert's run
    tl.store(base_ptr + ex, starts + before, mask=ex < n_experts)
    tl.debug_barrier()
    hi = tl.minimum(c * chunk + chunk, n_pairs)
    for i0 in range(c * chunk, hi, BLOCK):
        offs = i0 + tl.arange(0, BLOCK)
        ids = tl.load(ids_ptr + offs, mask=offs < hi, other=-1).to(tl.int32)
        # an id outside [0, n_experts) is in no run (and must not reach another row's counter)
        mask = (ids >= 0) & (ids < n_experts)
        slot = tl.atomic_add(base_ptr + ids, 1, mask=mask, sem="relaxed")
        tl.store(sorted_ptr + slot, offs, mask=mask)
    block_ends = tl.cumsum(blocks, axis=0)
    n_blocks = tl.sum(blocks, axis=0)
    if c == 0:
        tl.store(counts_ptr, n_blocks * BLOCK_M)
        tl.store(counts_ptr + 1, n_blocks)
    fill = starts + counts
    for b0 in range(c * BLOCKS, n_blocks, tl.num_programs(0) * BLOCKS):
        b = b0 + tl.arange(0, BLOCKS)
        bmask = b < n_blocks
        # a block's expert: the number of experts whose blocks end at or before it
        e_b = tl.sum((block_ends[None, :] <= b[:, None]).to(tl.int32), axis=1)
        tl.store(block_expert_ptr + b, e_b, mask=bmask)
        f = tl.sum(tl.where(ex[None, :] == e_b[:, None], fill[None, :], 0), axis=1)
        # the rows past the expert's pairs: padding, a pair id past the end
        rows = b[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :]
        tl.store(sorted_ptr + rows, tl.full([BLOCKS, BLOCK_M], 0, tl.int32) + n_pairs,
                 mask=bmask[:, None] & (rows >= f[:, None]))


@triton.jit
def _x_tile(row0, k0, x_rows, pmask, x_desc, hidden, BLOCK_K: tl.constexpr,
            X_BLOCKED: tl.constexpr):
    """The x rows of the expert block from row row0, K columns k0.. (gathered by token, or from
    the blocked copy)."""
    if X_BLOCKED:
        return x_desc.load([row0, k0])
    rk = k0 + tl.arange(0, BLOCK_K)
    return tl.load(x_rows + rk[None, :], mask=pmask[:, None] & (rk < hidden)[None, :], other=0.0)


@triton.jit
def _gate_up_two_dots(row0, x_rows, pmask, x_desc, w_desc, w_gate, w_up, row_gate, nmask, inter,
                      hidden, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, TMA_W: tl.constexpr, X_BLOCKED: tl.constexpr,
                      INTERPRET: tl.constexpr):
    """x w_gate^T and x w_up^T, one BLOCK_N-wide MMA each per K step."""
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        x = _x_tile(row0, k0, x_rows, pmask, x_desc, hidden, BLOCK_K, X_BLOCKED)
        if TMA_W:  # a gate tile's rows past I are up rows: masked at the store
            g = w_desc.load([row_gate, k0]).T
            u = w_desc.load([row_gate + inter, k0]).T
        else:
            rk = k0 + tl.arange(0, BLOCK_K)
            wmask = (rk < hidden)[:, None] & nmask[None, :]
            g = tl.load(w_gate + rk[:, None], mask=wmask, other=0.0)
            u = tl.load(w_up + rk[:, None], mask=wmask, other=0.0)
        acc_g += _mma(x, g, INTERPRET)
        acc_u += _mma(x, u, INTERPRET)
    return acc_g, acc_u


@triton.jit
def _gate_up_one_dot(row0, nb, e, x_rows, pmask, x_desc, w3_desc, hidden, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, X_BLOCKED: tl.constexpr,
                     INTERPRET: tl.constexpr):
    """Both products from one 2*BLOCK_N-wide MMA per K step: w3_desc sees w1 as [2E, I, H], so
    block [2e, nb * BLOCK_N, k0] holds the gate rows, then the up rows (past I: zeros)."""
    acc = tl.zeros([BLOCK_M, 2 * BLOCK_N], tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        x = _x_tile(row0, k0, x_rows, pmask, x_desc, hidden, BLOCK_K, X_BLOCKED)
        w = w3_desc.load([(2 * e).to(tl.int32), nb * BLOCK_N, k0])
        acc += _mma(x, w.reshape([2 * BLOCK_N, BLOCK_K]).T, INTERPRET)
    gate, up = tl.split(acc.reshape([BLOCK_M, 2, BLOCK_N]).permute(0, 2, 1))
    return gate, up


@triton.jit
def _gate_up_tile(b, nb, x_ptr, w1_ptr, act_ptr, sorted_ptr, block_expert_ptr, x_desc, w_desc,
                  act_desc, n_pairs, top_k, inter, hidden, stride_xt, stride_we, stride_wn,
                  stride_act, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, TMA_W: tl.constexpr, BLOCKED: tl.constexpr,
                  X_BLOCKED: tl.constexpr, ONE_DOT: tl.constexpr, ACT_TMA: tl.constexpr,
                  INTERPRET: tl.constexpr):
    """act for expert block b, intermediate columns nb: silu(x w_gate^T) * (x w_up^T)."""
    e = tl.load(block_expert_ptr + b).to(tl.int64)
    row0 = b * BLOCK_M
    pairs = tl.load(sorted_ptr + row0 + tl.arange(0, BLOCK_M))
    pmask = pairs < n_pairs
    tok = (pairs // top_k).to(tl.int64)
    rn = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < inter
    x_rows = x_ptr + tok[:, None] * stride_xt
    w_gate = w1_ptr + e * stride_we + rn.to(tl.int64)[None, :] * stride_wn
    w_up = w_gate + inter * stride_wn
    row_gate = (e * 2 * inter + nb * BLOCK_N).to(tl.int32)  # w1 as [E * 2I, H] rows (TMA_W)
    if ONE_DOT:
        acc_g, acc_u = _gate_up_one_dot(row0, nb, e, x_rows, pmask, x_desc, w_desc, hidden,
                                        BLOCK_M, BLOCK_N, BLOCK_K, X_BLOCKED, INTERPRET)
    else:
        acc_g, acc_u = _gate_up_two_dots(row0, x_rows, pmask, x_desc, w_desc, w_gate, w_up,
                                         row_gate, nmask, inter, hidden, BLOCK_M, BLOCK_N,
                                         BLOCK_K, TMA_W, X_BLOCKED, INTERPRET)
    act = acc_g / (1.0 + tl.exp2(-acc_g * 1.4426950408889634)) * acc_u
    if ACT_TMA:  # padding rows too (zeros: their x rows are), columns past I clipped
        act_desc.store([row0, nb * BLOCK_N], act.to(act_ptr.dtype.element_ty))
    else:
        if BLOCKED:  # the block's own rows; its padding rows stay unwritten and unread
            rows = row0.to(tl.int64) + tl.arange(0, BLOCK_M)
        else:
            rows = pairs.to(tl.int64)
        out = act_ptr + rows[:, None] * stride_act + rn[None, :]
        tl.store(out, act.to(act_ptr.dtype.element_ty), mask=pmask[:, None] & nmask[None, :])


@triton.jit
def _walk(n_cols, n_tiles, PERSISTENT: tl.constexpr):
    """(first tile, stride) of this program's walk over the tiles: a grid-stride walk, or the
    one tile (program_id(0) = block, program_id(1) = column tile) of a 2-D grid."""
    if PERSISTENT:
        return tl.program_id(0), tl.num_programs(0)
    return tl.program_id(0) * n_cols + tl.program_id(1), n_tiles + 1


@triton.jit
def _gate_up_silu_kernel(x_ptr, w1_ptr, act_ptr, sorted_ptr, block_expert_ptr, counts_ptr,
                         n_pairs, top_k, hidden, inter, n_experts, x_rows, act_rows, stride_xt,
                         stride_we, stride_wn, stride_act, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TMA_W: tl.constexpr,
                         BLOCKED: tl.constexpr, X_BLOCKED: tl.constexpr,
                         PERSISTENT: tl.constexpr, FLATTEN: tl.constexpr, ONE_DOT: tl.constexpr,
                         ACT_TMA: tl.constexpr, INTERPRET: tl.constexpr):
    """One (expert block, column tile) per program; PERSISTENT: programs walk the blocks' tiles
    block by block (FLATTEN: the tile loop flattened into the K loop)."""
    x_desc = None
    w_desc = None
    act_desc = None
    if ACT_TMA:  # act in expert-block order, [act_rows, I]
        act_desc = tl.make_tensor_descriptor(act_ptr, shape=[act_rows, inter],
                                             strides=[stride_act, 1],
                                             block_shape=[BLOCK_M, BLOCK_N])
    if X_BLOCKED:  # x_ptr is the block-ordered copy, [x_rows, H]
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[x_rows, hidden], strides=[stride_xt, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
    if ONE_DOT:  # w1 as [2E, I, H]: a block of [2, BLOCK_N, BLOCK_K] is a gate and an up tile
        w_desc = tl.make_tensor_descriptor(w1_ptr, shape=[n_experts * 2, inter, hidden],
                                           strides=[inter * stride_wn, stride_wn, 1],
                                           block_shape=[2, BLOCK_N, BLOCK_K])
    elif TMA_W:
        w_desc = tl.make_tensor_descriptor(w1_ptr, shape=[n_experts * 2 * inter, hidden],
                                           strides=[stride_wn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    n_cols = tl.cdiv(inter, BLOCK_N)
    n_tiles = tl.load(counts_ptr + 1) * n_cols
    start, step = _walk(n_cols, n_tiles, PERSISTENT)
    for t in tl.range(start, n_tiles, step, flatten=FLATTEN):
        _gate_up_tile(t // n_cols, t % n_cols, x_ptr, w1_ptr, act_ptr, sorted_ptr,
                      block_expert_ptr, x_desc, w_desc, act_desc, n_pairs, top_k, inter, hidden,
                      stride_xt, stride_we, stride_wn, stride_act, BLOCK_M, BLOCK_N, BLOCK_K,
                      TMA_W, BLOCKED, X_BLOCKED, ONE_DOT, ACT_TMA, INTERPRET)


@triton.jit
def _block_rows_kernel(x_ptr, xb_ptr, sorted_ptr, counts_ptr, n_pairs, top_k, hidden, stride_x,
                       stride_xb, ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    """Row r of the copy = x[token of the pair in row r of the runs]; the padding rows are not
    written (each reaches only its own, unstored, GEMM output row)."""
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    pairs = tl.load(sorted_ptr + r, mask=r < tl.load(counts_ptr), other=n_pairs)
    mask = (pairs < n_pairs)[:, None] & (cols < hidden)[None, :]
    tok = (pairs // top_k).to(tl.int64)
    rows = tl.load(x_ptr + tok[:, None] * stride_x + cols[None, :], mask=mask)
    tl.store(xb_ptr + r[:, None] * stride_xb + cols[None, :], rows, mask=mask)


@triton.jit
def _down_tile(b, nb, act_ptr, w2_ptr, y_ptr, weights_ptr, sorted_ptr, block_expert_ptr, a_desc,
               w_desc, n_pairs, hidden, inter, stride_act, stride_we, stride_wn, stride_y,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               TMA_W: tl.constexpr, BLOCKED: tl.constexpr, INTERPRET: tl.constexpr):
    """y rows of expert block b, hidden columns nb: act w2^T times each pair's routing weight."""
    e = tl.load(block_expert_ptr + b).to(tl.int64)
    row0 = b * BLOCK_M
    pairs = tl.load(sorted_ptr + row0 + tl.arange(0, BLOCK_M))
    pmask = pairs < n_pairs
    rn = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < hidden
    a_rows = act_ptr + pairs.to(tl.int64)[:, None] * stride_act
    w_cols = w2_ptr + e * stride_we + rn.to(tl.int64)[None, :] * stride_wn
    row_w = (e * hidden + nb * BLOCK_N).to(tl.int32)  # w2 as [E * H, I] rows (TMA_W)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        kmask = rk < inter
        if BLOCKED:  # padding rows hold garbage; each reaches only its own, unstored, output row
            a = a_desc.load([row0, k0])
        else:
            a = tl.load(a_rows + rk[None, :], mask=pmask[:, None] & kmask[None, :], other=0.0)
        if TMA_W:  # rows past this expert's H are the next expert's: masked at the store
            w = w_desc.load([row_w, k0]).T
        else:
            w = tl.load(w_cols + rk[:, None], mask=kmask[:, None] & nmask[None, :], other=0.0)
        acc += _mma(a, w, INTERPRET)
    rw = tl.load(weights_ptr + pairs, mask=pmask, other=0.0)
    out = y_ptr + pairs.to(tl.int64)[:, None] * stride_y + rn[None, :]
    tl.store(out, (acc * rw[:, None]).to(y_ptr.dtype.element_ty),
             mask=pmask[:, None] & nmask[None, :])


@triton.jit
def _down_kernel(act_ptr, w2_ptr, y_ptr, weights_ptr, sorted_ptr, block_expert_ptr, counts_ptr,
                 n_pairs, hidden, inter, n_experts, act_rows, stride_act, stride_we, stride_wn,
                 stride_y, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 TMA_W: tl.constexpr, BLOCKED: tl.constexpr, PERSISTENT: tl.constexpr,
                 INTERPRET: tl.constexpr):
    """Like the gate/up kernel: a tile per program, or PERSISTENT programs flattened."""
    a_desc = None
    w_desc = None
    if BLOCKED:
        a_desc = tl.make_tensor_descriptor(act_ptr, shape=[act_rows, inter],
                                           strides=[stride_act, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
    if TMA_W:
        w_desc = tl.make_tensor_descriptor(w2_ptr, shape=[n_experts * hidden, inter],
                                           strides=[stride_wn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    n_cols = tl.cdiv(hidden, BLOCK_N)
    n_tiles = tl.load(counts_ptr + 1) * n_cols
    start, step = _walk(n_cols, n_tiles, PERSISTENT)
    for t in tl.range(start, n_tiles, step, flatten=True):
        _down_tile(t // n_cols, t % n_cols, act_ptr, w2_ptr, y_ptr, weights_ptr, sorted_ptr,
                   block_expert_ptr, a_desc, w_desc, n_pairs, hidden, inter, stride_act,
                   stride_we, stride_wn, stride_y, BLOCK_M, BLOCK_N, BLOCK_K, TMA_W, BLOCKED,
                   INTERPRET)


@triton.jit
def _sum_topk_kernel(y_ptr, ids_ptr, out_ptr, n_experts, hidden, top_k, stride_y, stride_out,
                     BLOCK: tl.constexpr):
    """out[t] = the sum of token t's top_k pair rows of y, in slot order, leaving out the pairs
    whose expert id is outside [0, n_experts): no run holds them, so their rows of y were never
    written (expert parallelism marks a remote expert -1)."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < hidden
    acc = tl.zeros([BLOCK], tl.float32)
    for j in range(0, top_k):
        pair = t * top_k + j
        e = tl.zeros([BLOCK], tl.int64) + tl.load(ids_ptr + pair).to(tl.int64)
        routed = mask & (e >= 0) & (e < n_experts)
        acc += tl.load(y_ptr + pair * stride_y + cols, mask=routed, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * stride_out + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory where device-side tensor descriptors are written (Triton asks for it)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # CPU runs (interpreter): plan as for an H200


def _grid(blocks: int, cols: int, persistent: bool, device: torch.device) -> tuple:
    """A program per (expert block, column tile), or PROGRAMS_PER_SM persistent programs per SM
    (the used blocks are known on the device only, so the grid covers the most there can be)."""
    if not persistent:
        return (blocks, cols)
    return (min(blocks * cols, max(1, round(PROGRAMS_PER_SM * _num_sms(device)))),)


class Alignment(NamedTuple):
    """The pairs laid out by expert for the grouped GEMMs (all on the device but max_blocks).

    Expert e's pairs take rows from its run's start on, in any order; the run is padded with the
    id n_pairs to a multiple of BLOCK_M, and every BLOCK_M rows are a block of one expert."""
    sorted_ids: torch.Tensor  # [max_blocks * BLOCK_M] pair ids by row
    block_expert: torch.Tensor  # [max_blocks]
    counts: torch.Tensor  # [2]: rows of all runs, blocks
    max_blocks: int  # the most blocks there can be (grids are sized by it)


def moe_align(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> Alignment:
    n_pairs = topk_ids.numel()
    dev = topk_ids.device
    max_blocks = triton.cdiv(n_pairs, block_m) + num_experts
    n_chunks = min(triton.cdiv(n_pairs, ALIGN_BLOCK), ALIGN_PROGRAMS)
    chunk = triton.cdiv(triton.cdiv(n_pairs, n_chunks), ALIGN_BLOCK) * ALIGN_BLOCK
    n_chunks = triton.cdiv(n_pairs, chunk)
    e_pad = triton.next_power_of_2(num_experts)
    out = Alignment(
        sorted_ids=torch.empty(max_blocks * block_m, dtype=torch.int32, device=dev),
        block_expert=torch.empty(max_blocks, dtype=torch.int32, device=dev),
        counts=torch.empty(2, dtype=torch.int32, device=dev), max_blocks=max_blocks)
    ids = topk_ids.reshape(-1)
    hist = torch.empty((2 * n_chunks, num_experts), dtype=torch.int32, device=dev)
    if n_chunks > 1:
        _chunk_histogram_kernel[(n_chunks,)](ids, hist, n_pairs, chunk, num_experts, E_PAD=e_pad,
                                             BLOCK=ALIGN_BLOCK, num_warps=ALIGN_WARPS)
    _align_scatter_kernel[(n_chunks,)](
        ids, hist, out.sorted_ids, out.block_expert, out.counts, n_pairs, chunk, n_chunks,
        num_experts, BLOCK_M=block_m, E_PAD=e_pad,
        BLOCK=ALIGN_BLOCK, ROWS=max(2, min(triton.next_power_of_2(n_chunks), 4096 // e_pad)),
        BLOCKS=max(1, 2048 // max(e_pad, block_m)), num_warps=ALIGN_WARPS)
    return out


def _check_inputs(hidden_states, w1, w2, topk_weights, topk_ids):
    num_tokens, hidden = hidden_states.shape
    num_experts, two_i, hidden_w = w1.shape
    if hidden_w != hidden or w2.shape != (num_experts, hidden, two_i // 2):
        raise ValueError("w1 [E, 2I, H] / w2 [E, H, I] do not match hidden_states")
    if topk_weights.shape != topk_ids.shape or topk_ids.shape[0] != num_tokens:
        raise ValueError("topk_weights / topk_ids must be [T, top_k]")
    for t in (hidden_states, w1, w2):
        if t.stride(-1) != 1:
            raise ValueError("the innermost dimensions must be contiguous")


def _launch_constants(block_m: int, decode: bool, descriptors: bool) -> dict:
    """The constexprs both GEMMs share. descriptors: contiguous experts whose row strides are
    16-byte multiples, so weights and the blocked act can go through tensor descriptors."""
    return {"BLOCK_M": block_m, "BLOCK_K": DECODE_BLOCK_K if decode else PREFILL_BLOCK_K,
            "INTERPRET": _INTERPRET, "num_warps": DECODE_WARPS if decode else PREFILL_WARPS,
            "num_stages": DECODE_STAGES if decode else PREFILL_STAGES,
            "TMA_W": TMA_WEIGHTS and descriptors, "BLOCKED": BLOCKED_ACT and descriptors,
            "PERSISTENT": PERSISTENT}


def _blocked_x(hidden_states, al: Alignment, block_m: int, n_pairs: int, top_k: int):
    """x's rows copied into the runs' order (BLOCKED_X)."""
    hidden = hidden_states.shape[1]
    x = torch.empty((al.max_blocks * block_m, hidden), dtype=hidden_states.dtype,
                    device=hidden_states.device)
    # 8192 elements a program: a [128, 1024] tile spilled 9.6 KB (ptxas, sm_90a)
    cols = min(triton.next_power_of_2(hidden), max(64, 8192 // block_m))
    _block_rows_kernel[(al.max_blocks, triton.cdiv(hidden, cols))](
        hidden_states, x, al.sorted_ids, al.counts, n_pairs, top_k, hidden,
        hidden_states.stride(0), x.stride(0), ROWS=block_m, BLOCK_H=cols, num_warps=4)
    return x


def fused_moe(hidden_states, w1, w2, topk_weights, topk_ids):
    _check_inputs(hidden_states, w1, w2, topk_weights, topk_ids)
    out = torch.empty_like(hidden_states)
    num_tokens, hidden = hidden_states.shape
    if num_tokens == 0:
        return out
    num_experts, inter, top_k = w1.shape[0], w1.shape[1] // 2, topk_ids.shape[1]
    n_pairs = num_tokens * top_k
    # Rows per expert block: about the mean pairs per expert, 16..PREFILL_BLOCK_M.
    block_m = min(PREFILL_BLOCK_M,
                  max(16, triton.next_power_of_2(triton.cdiv(n_pairs, num_experts))))
    decode = block_m <= 32
    descriptors = (w1.is_contiguous() and w2.is_contiguous()
                   and (hidden * w1.element_size()) % 16 == 0
                   and (inter * w2.element_size()) % 16 == 0)
    tiles = _launch_constants(block_m, decode, descriptors)
    al = moe_align(topk_ids, num_experts, block_m)
    x_blocked = BLOCKED_X and descriptors
    if descriptors and hidden_states.is_cuda:
        triton.set_allocator(_descriptor_scratch)
    dev = hidden_states.device
    act_rows = al.max_blocks * block_m if tiles["BLOCKED"] else n_pairs
    act = torch.empty((act_rows, inter), dtype=hidden_states.dtype, device=dev)
    y = torch.empty((n_pairs, hidden), dtype=hidden_states.dtype, device=dev)
    weights = topk_weights.reshape(-1).float()
    x = _blocked_x(hidden_states, al, block_m, n_pairs, top_k) if x_blocked else hidden_states
    bn = DECODE_BLOCK_N if decode else PREFILL_BLOCK_N
    table = (al.sorted_ids, al.block_expert, al.counts)
    _gate_up_silu_kernel[_grid(al.max_blocks, triton.cdiv(inter, bn), PERSISTENT, dev)](
        x, w1, act, *table, n_pairs, top_k, hidden, inter, num_experts, x.shape[0], act_rows,
        x.stride(0), w1.stride(0), w1.stride(1), act.stride(0), BLOCK_N=bn,
        X_BLOCKED=x_blocked, FLATTEN=GATE_UP_FLATTEN,
        ONE_DOT=GATE_UP_ONE_DOT and tiles["TMA_W"] and not decode,
        # prefill only: at decode an expert block's few rows are not worth a store buffer
        ACT_TMA=ACT_STORE_TMA and tiles["BLOCKED"] and not decode, **tiles)
    down_bn = bn if decode else DOWN_BLOCK_N
    if not decode:
        tiles["num_stages"] = DOWN_STAGES
    _down_kernel[_grid(al.max_blocks, triton.cdiv(hidden, down_bn), PERSISTENT, dev)](
        act, w2, y, weights, *table, n_pairs, hidden, inter, num_experts, act_rows,
        act.stride(0), w2.stride(0), w2.stride(1), y.stride(0), BLOCK_N=down_bn, **tiles)
    block = min(1024, triton.next_power_of_2(hidden))
    _sum_topk_kernel[(num_tokens, triton.cdiv(hidden, block))](
        y, topk_ids.reshape(-1), out, num_experts, hidden, top_k, y.stride(0), out.stride(0),
        BLOCK=block, num_warps=4)
    return out


class Model(torch.nn.Module):
    def forward(self, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        return fused_moe(hidden_states, w1, w2, topk_weights, topk_ids)
