"""GQA paged decode attention: split-KV (flash-decoding) Triton kernels aimed at HBM bandwidth.

Decode attention reads every used K/V byte once and does ~2 FLOPs per byte per query head, so it
is bound by HBM bandwidth; the design follows from that:
- one program per (sequence, kv head, KV split): the GROUP query heads that share a kv head are
  processed together (q tile [16, D], padded rows masked), so each K/V tile is loaded once for the
  whole group, and QK^T / PV run on tensor cores (tl.dot) instead of per-head CUDA-core loops;
- the KV length is cut into fixed splits of SPLIT tokens: with mixed lengths (256..4096) every
  program does about the same work, there are ~14 programs per SM at batch 64 (waves, no long
  tail from the longest sequence), and programs of splits past a sequence's end exit at once;
- paging: for each token tile the page ids are gathered from the block table and the K/V rows
  addressed as page * page_stride + offset * token_stride; a (page, head) row is 256 contiguous
  bytes, so loads stay coalesced. The loop is software-pipelined (num_stages) so the next tile's
  loads are in flight during the current tile's math;
- online softmax in fp32 with exp2 (scale * log2 e folded into one multiply); each split writes its
  normalized partial output and log-sum-exp (fp32), and a second small kernel merges the splits of
  every (sequence, head). Partials are ~2% of the K/V bytes at SPLIT=512.
- SCHEDULE "balanced" (not yet measured on a GPU): instead of fixed splits, about SM count x
  BALANCED_PROGRAMS_PER_SM programs, each an equal range of the row of all sequences' tiles
  (prefix sums of the lengths in the kernel, no host sync) for one kv head: one wave of equal
  work; the pieces of a sequence cut between ranges are merged by _merge_pieces_kernel. 160
  registers under Triton 3.9's ptxas against the split kernel's 103 (3 resident programs per SM
  instead of 5; BALANCED_MAXNREG 128 gives 4 with 72 bytes spilled).
- TMA_PAGES (not yet measured on a GPU): a tile is one page, fetched for K and for V by one
  tensor-descriptor bulk copy each (the cache seen as [pages * page, kv heads * head]): no
  per-thread gather addresses (56 registers against 103 under Triton 3.9's ptxas, so ~9 resident
  programs per SM instead of 5) and deeper pipelines in the same shared memory; the slots of a
  page past the sequence's end are loaded too, so V rows there are zeroed (a NaN left in an
  unused slot would otherwise reach the output through 0 * NaN).
No torch compute in forward: allocations only.
"""

import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner can search them). Chosen by
# benchmarks/attention_h200.py on the H200 (results/h200-attention/sweep-2e35075), decode-b64:
# 109.3 us a call (split kernel 104.1, merge 3.7); BLOCK_N 32 or 128, 3-4 stages and 8 warps
# were 1-10% slower, 4 or 8 splits per sequence within 1%.
BLOCK_N = 64  # KV tokens per tile
SPLITS_PER_SEQ = 16  # the longest possible sequence is cut into about this many splits
KV_SPLIT_BLOCK = 1024  # max KV tokens per program (split size), a multiple of BLOCK_N
NUM_WARPS = 4
NUM_STAGES = 2
# adjacent kv heads per program (block-diagonal tiles, see the kernel): 2 and 4 were slower on the
# H200, 116-242 us against 109.3 (sweep-17f1fa3: registers 188 / 255 with spills at 4 warps)
KV_HEADS_PER_PROGRAM = 1
FUSED_MERGE = False  # the last split of each sequence merges (no merge kernel); to be swept
# "splits": a program per (sequence, kv heads, fixed-size split); "balanced": SM count x
# BALANCED_PROGRAMS_PER_SM programs over (tile range, kv heads), each range the same number of
# tiles of all sequences laid end to end (no wave tail whatever the lengths); to be swept
SCHEDULE = "splits"
BALANCED_PROGRAMS_PER_SM = 5
BALANCED_MAXNREG = None  # a register cap (ptxas .maxnreg) for more resident programs; swept
# each tile is one page, loaded by one tensor-descriptor bulk copy for K and one for V (BLOCK_N
# becomes the page size); to be swept
TMA_PAGES = False
MERGE_HEADS = 8  # query heads per program of the merge kernel (4: +1 us; the old per-head
# merge took 8.1 us, a chain of dependent loads per head)
PDL = True  # the merge is launched while the split kernel drains (sm_90+)


@triton.jit
def _mma(a, b, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b)


@triton.jit
def _attend(q, k_ptr, v_ptr, bt_row, start, end, kvh0, qk_scale, stride_kp, stride_ks,
            stride_kh, stride_vp, stride_vs, stride_vh, cache_rows, ROWS: tl.constexpr,
            COLS: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
            KV_WIDTH: tl.constexpr, TMA: tl.constexpr, INTERPRET: tl.constexpr):
    """Online softmax of the q rows over tokens [start, end) of one sequence: the running max,
    sum and unnormalized output. K/V rows: COLS contiguous elements from kv head kvh0.
    TMA (BLOCK_N == PAGE, a contiguous cache seen as [cache_rows, KV_WIDTH]): each tile is one
    page, one bulk copy for K and one for V."""
    c = tl.arange(0, COLS)
    if TMA:
        k_desc = tl.make_tensor_descriptor(k_ptr, shape=[cache_rows, KV_WIDTH],
                                           strides=[stride_ks, 1], block_shape=[PAGE, COLS])
        v_desc = tl.make_tensor_descriptor(v_ptr, shape=[cache_rows, KV_WIDTH],
                                           strides=[stride_vs, 1], block_shape=[PAGE, COLS])
    else:
        k_desc = None
        v_desc = None
    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, COLS], tl.float32)
    for t0 in range(start, end, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        tmask = t < end
        if TMA:
            row = tl.load(bt_row + t0 // PAGE) * PAGE
            k = k_desc.load([row, kvh0 * stride_kh])
        else:
            page = tl.load(bt_row + t // PAGE, mask=tmask, other=0).to(tl.int64)
            within = (t % PAGE).to(tl.int64)
            k_off = page * stride_kp + within * stride_ks + kvh0 * stride_kh
            k = tl.load(k_ptr + k_off[:, None] + c[None, :], mask=tmask[:, None], other=0.0)
        s = _mma(q, tl.trans(k), INTERPRET) * qk_scale  # [ROWS, BLOCK_N], log2 units
        s = tl.where(tmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if TMA:
            # the page's slots past the sequence's end hold anything (NaN too): p is 0 there,
            # but 0 * NaN is not
            v = tl.where(tmask[:, None], v_desc.load([row, kvh0 * stride_vh]), 0.0)
        else:
            v_off = page * stride_vp + within * stride_vs + kvh0 * stride_vh
            v = tl.load(v_ptr + v_off[:, None] + c[None, :], mask=tmask[:, None], other=0.0)
        acc = acc * alpha[:, None] + _mma(p.to(v.dtype), v, INTERPRET)
        m_i = m_new
    return m_i, l_i, acc


@triton.jit
def _paged_decode_split_kernel(
        q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, o_ptr, lse_ptr, qk_scale,
        stride_qb, stride_qh, stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
        stride_btb, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
        out_ptr, ticket_ptr, stride_outb, stride_outh, cache_rows,
        GROUP: tl.constexpr, ROWS: tl.constexpr, KV_HEADS: tl.constexpr, HEAD: tl.constexpr,
        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
        MAX_SPLITS: tl.constexpr, FUSED: tl.constexpr, KV_WIDTH: tl.constexpr,
        TMA: tl.constexpr, INTERPRET: tl.constexpr):
    """KV_HEADS adjacent kv heads per program: their K/V rows are one contiguous run of
    KV_HEADS * HEAD elements per token. The tiles are block-diagonal: query row r (head
    kvh0 * GROUP + r) holds its query only in the columns of its own kv head (zeros elsewhere), so
    one [ROWS, KV_HEADS * HEAD] x [KV_HEADS * HEAD, BLOCK_N] product gives every row its own
    head's scores, and the PV product's other heads' columns are dropped at the store.
    FUSED: a sequence of one split stores its output directly; otherwise the split that finishes
    last (a ticket per sequence and program column) merges the partials, from L2."""
    b = tl.program_id(0)
    kvh0 = tl.program_id(1) * KV_HEADS
    split = tl.program_id(2)
    length = tl.load(lens_ptr + b)
    start = split * SPLIT
    if start < length:
        end = tl.minimum(start + SPLIT, length)
        r = tl.arange(0, ROWS)
        c = tl.arange(0, KV_HEADS * HEAD)
        heads = kvh0 * GROUP + r
        rmask = r < KV_HEADS * GROUP
        own = rmask[:, None] & ((r // GROUP)[:, None] == (c // HEAD)[None, :])
        q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh
                    + (c % HEAD)[None, :], mask=own, other=0.0)
        m_i, l_i, acc = _attend(q, k_ptr, v_ptr, bt_ptr + b.to(tl.int64) * stride_btb, start, end,
                                kvh0, qk_scale, stride_kp, stride_ks, stride_kh, stride_vp,
                                stride_vs, stride_vh, cache_rows, ROWS, KV_HEADS * HEAD, PAGE,
                                BLOCK_N, KV_WIDTH, TMA, INTERPRET)
        out = acc / l_i[:, None]
        n_splits = tl.cdiv(length, SPLIT)
        out_rows = out_ptr + b.to(tl.int64) * stride_outb + heads[:, None] * stride_outh + (
            c % HEAD)[None, :]
        if FUSED and n_splits == 1:
            tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=own)
        else:
            o_base = o_ptr + b.to(tl.int64) * stride_ob + split * stride_os
            tl.store(o_base + heads[:, None] * stride_oh + (c % HEAD)[None, :], out, mask=own)
            tl.store(lse_ptr + b.to(tl.int64) * stride_lb + heads * stride_lh + split,
                     m_i + tl.log2(l_i), mask=rmask)
            if FUSED:
                tl.debug_barrier()  # every thread's partial is written before the ticket
                ticket = tl.atomic_add(ticket_ptr + b * tl.num_programs(1) + tl.program_id(1),
                                       1, sem="acq_rel", scope="gpu")
                if ticket == n_splits - 1:
                    merged = _merge_rows(o_ptr + b.to(tl.int64) * stride_ob, lse_ptr
                                         + b.to(tl.int64) * stride_lb, heads, c % HEAD, own,
                                         rmask, n_splits, stride_oh, stride_os, stride_lh,
                                         ROWS, KV_HEADS * HEAD, MAX_SPLITS)
                    tl.store(out_rows, merged.to(out_ptr.dtype.element_ty), mask=own)


@triton.jit
def _merge_rows(o_row, lse_row, heads, col, own, rmask, n_splits, stride_oh, stride_os, stride_lh,
                ROWS: tl.constexpr, COLS: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """The splits' partials of one sequence's rows combined by their softmax mass. Loads bypass
    L1 (.cg): the other splits wrote them from other SMs."""
    s = tl.arange(0, MAX_SPLITS)
    used = rmask[:, None] & (s < n_splits)[None, :]
    lse = tl.load(lse_row + heads[:, None] * stride_lh + s[None, :], mask=used,
                  other=float("-inf"), cache_modifier=".cg")
    top = tl.max(lse, axis=1)
    w = tl.exp2(lse - tl.where(top == float("-inf"), 0.0, top)[:, None])
    w = w / tl.maximum(tl.sum(w, axis=1), 1e-30)[:, None]
    acc = tl.zeros([ROWS, COLS], tl.float32)
    for j in range(0, n_splits):
        part = tl.load(o_row + j * stride_os + heads[:, None] * stride_oh + col[None, :],
                       mask=own, other=0.0, cache_modifier=".cg")
        acc += part * tl.sum(tl.where(s[None, :] == j, w, 0.0), axis=1)[:, None]
    return acc


@triton.jit
def _merge_splits_kernel(o_part_ptr, lse_ptr, lens_ptr, out_ptr, num_heads,
                         stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                         stride_outb, stride_outh,
                         D: tl.constexpr, SPLIT: tl.constexpr, MAX_SPLITS: tl.constexpr,
                         HEADS: tl.constexpr, USE_PDL: tl.constexpr):
    """HEADS heads of one sequence: every split's partial output and LSE loaded at once (one
    latency, not a chain per head), weighted by the splits' share of the softmax mass."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # launched early (PDL): the split kernel's writes first
    b = tl.program_id(0)
    h = tl.program_id(1) * HEADS + tl.arange(0, HEADS)
    s = tl.arange(0, MAX_SPLITS)
    d = tl.arange(0, D)
    n_splits = tl.cdiv(tl.load(lens_ptr + b), SPLIT)
    used = (h < num_heads)[:, None] & (s < n_splits)[None, :]  # [HEADS, MAX_SPLITS]
    part = b.to(tl.int64) * stride_ob + h[:, None] * stride_oh + s[None, :] * stride_os
    o = tl.load(o_part_ptr + part[:, :, None] + d[None, None, :], mask=used[:, :, None],
                other=0.0)
    lse = tl.load(lse_ptr + b.to(tl.int64) * stride_lb + h[:, None] * stride_lh + s[None, :],
                  mask=used, other=float("-inf"))
    top = tl.max(lse, axis=1)
    w = tl.exp2(lse - tl.where(top == float("-inf"), 0.0, top)[:, None])  # padding heads: 0
    w = w / tl.maximum(tl.sum(w, axis=1), 1e-30)[:, None]
    out = tl.sum(o * w[:, :, None], axis=1)
    tl.store(out_ptr + b.to(tl.int64) * stride_outb + h[:, None] * stride_outh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=(h < num_heads)[:, None])


@triton.jit
def _tile_layout(lens_ptr, batch, BATCH: tl.constexpr, BLOCK_N: tl.constexpr):
    """All sequences' tiles in one row, sequence after sequence: the row index of each, its first
    tile, the tile after its last, and the number of tiles."""
    i = tl.arange(0, BATCH)
    n = tl.cdiv(tl.load(lens_ptr + i, mask=i < batch, other=0), BLOCK_N)
    ends = tl.cumsum(n, axis=0)
    return i, ends - n, ends, tl.sum(n, axis=0)


@triton.jit
def _pick(values, i, at):
    return tl.sum(tl.where(i == at, values, 0), axis=0)


@triton.jit
def _range_start(p, total, programs):
    return (tl.cast(p, tl.int64) * total // programs).to(tl.int32)


@triton.jit
def _owner(tile, total, programs):
    """The last program whose range starts at or before `tile`: the one whose range holds it."""
    return ((tl.cast(tile + 1, tl.int64) * programs + total - 1) // total - 1).to(tl.int32)


@triton.jit
def _paged_decode_balanced_kernel(
        q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, o_ptr, lse_ptr, qk_scale, batch,
        stride_qb, stride_qh, stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
        stride_btb, stride_or, stride_oh, stride_lr, cache_rows, BATCH: tl.constexpr,
        GROUP: tl.constexpr, ROWS: tl.constexpr, KV_HEADS: tl.constexpr, HEAD: tl.constexpr,
        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, KV_WIDTH: tl.constexpr, TMA: tl.constexpr,
        INTERPRET: tl.constexpr):
    """Program (p, g) takes tiles [p * total // P, (p + 1) * total // P) of the row of all
    sequences' tiles for kv heads g * KV_HEADS...: the same work per program whatever the
    lengths. Each piece of a sequence leaves its fp32 output and LSE in a row of o/lse: slot 0 or
    1 of the program (its range's first or last piece) or, for a sequence inside the range, the
    sequence's own row after the pieces' ([2 * P + batch, heads, HEAD]); the merge finishes
    both."""
    p = tl.program_id(0)
    programs = tl.num_programs(0)
    kvh0 = tl.program_id(1) * KV_HEADS
    i, firsts, ends, total = _tile_layout(lens_ptr, batch, BATCH, BLOCK_N)
    cur = _range_start(p, total, programs)
    stop = _range_start(p + 1, total, programs)
    r = tl.arange(0, ROWS)
    c = tl.arange(0, KV_HEADS * HEAD)
    heads = kvh0 * GROUP + r
    rmask = r < KV_HEADS * GROUP
    own = rmask[:, None] & ((r // GROUP)[:, None] == (c // HEAD)[None, :])
    piece = 0
    while cur < stop:
        b = tl.sum(tl.where(ends <= cur, 1, 0), axis=0)  # the sequence that holds tile `cur`
        first = _pick(firsts, i, b)
        last = _pick(ends, i, b)
        until = tl.minimum(stop, last)
        q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh
                    + (c % HEAD)[None, :], mask=own, other=0.0)
        m_i, l_i, acc = _attend(q, k_ptr, v_ptr, bt_ptr + b.to(tl.int64) * stride_btb,
                                (cur - first) * BLOCK_N,
                                tl.minimum((until - first) * BLOCK_N, tl.load(lens_ptr + b)),
                                kvh0, qk_scale, stride_kp, stride_ks, stride_kh, stride_vp,
                                stride_vs, stride_vh, cache_rows, ROWS, KV_HEADS * HEAD, PAGE,
                                BLOCK_N, KV_WIDTH, TMA, INTERPRET)
        # one store for both cases (as in the MLA kernel: two store paths cost registers)
        row = tl.where((cur == first) & (until == last), 2 * programs + b,
                       2 * p + tl.minimum(piece, 1)).to(tl.int64)
        tl.store(o_ptr + row * stride_or + heads[:, None] * stride_oh + (c % HEAD)[None, :],
                 acc / l_i[:, None], mask=own)
        tl.store(lse_ptr + row * stride_lr + heads, m_i + tl.log2(l_i), mask=rmask)
        cur = until
        piece += 1


@triton.jit
def _merge_pieces_kernel(o_ptr, lse_ptr, lens_ptr, out_ptr, num_heads, batch, programs,
                         stride_or, stride_oh, stride_lr, stride_outb, stride_outh,
                         BATCH: tl.constexpr, D: tl.constexpr, HEADS: tl.constexpr,
                         BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
    """HEADS heads of one sequence: its row copied where one program finished it, else the
    partials of its pieces, from the programs that hold its tiles in turn, combined by their
    softmax mass."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # launched early (PDL): the balanced kernel's writes first
    b = tl.program_id(0)
    h = tl.program_id(1) * HEADS + tl.arange(0, HEADS)
    hmask = h < num_heads
    d = tl.arange(0, D)
    i, firsts, ends, total = _tile_layout(lens_ptr, batch, BATCH, BLOCK_N)
    first = _pick(firsts, i, b)
    last = _pick(ends, i, b)
    p_first = _owner(first, total, programs)
    p_last = _owner(last - 1, total, programs)
    out_rows = out_ptr + b.to(tl.int64) * stride_outb + h[:, None] * stride_outh + d[None, :]
    if (last > first) & (p_last == p_first):  # finished by one program
        whole = tl.load(o_ptr + (2 * programs + b).to(tl.int64) * stride_or
                        + h[:, None] * stride_oh + d[None, :], mask=hmask[:, None], other=0.0)
        tl.store(out_rows, whole.to(out_ptr.dtype.element_ty), mask=hmask[:, None])
    elif last > first:
        m_i = tl.full([HEADS], float("-inf"), tl.float32)
        l_i = tl.zeros([HEADS], tl.float32)
        acc = tl.zeros([HEADS, D], tl.float32)
        for j in range(p_first, p_last + 1):
            begin = _range_start(j, total, programs)
            if begin < _range_start(j + 1, total, programs):  # more programs than tiles: gaps
                # the sequence is the first piece of every range after p_first's, and of
                # p_first's only where that range starts with it
                row = tl.cast(2 * j + tl.where((j > p_first) | (begin == first), 0, 1), tl.int64)
                lse = tl.load(lse_ptr + row * stride_lr + h, mask=hmask, other=0.0)
                part = tl.load(o_ptr + row * stride_or + h[:, None] * stride_oh + d[None, :],
                               mask=hmask[:, None], other=0.0)
                m_new = tl.maximum(m_i, lse)
                alpha = tl.exp2(m_i - m_new)
                w = tl.exp2(lse - m_new)
                acc = acc * alpha[:, None] + part * w[:, None]
                l_i = l_i * alpha + w
                m_i = m_new
        tl.store(out_rows, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
                 mask=hmask[:, None])


def _kv_heads_per_program(num_kv_heads: int, k_cache, v_cache) -> int:
    """KV_HEADS_PER_PROGRAM where it divides the kv heads and each token's heads are one
    contiguous row of the cache; else 1."""
    head_size = k_cache.shape[-1]
    if (KV_HEADS_PER_PROGRAM > 1 and num_kv_heads % KV_HEADS_PER_PROGRAM == 0
            and k_cache.stride(2) == head_size and v_cache.stride(2) == head_size):
        return KV_HEADS_PER_PROGRAM
    return 1


def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch for the merge: Hopper and later, never the interpreter."""
    return (PDL and device.type == "cuda" and not _INTERPRET
            and torch.cuda.get_device_capability(device)[0] >= 9)


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens):
    batch, num_q_heads, head_size = q.shape
    num_pages, page_size, num_kv_heads, kv_head_size = k_cache.shape
    if v_cache.shape != k_cache.shape or kv_head_size != head_size:
        raise ValueError("q, k_cache and v_cache disagree on head size / layout")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads do not group over {num_kv_heads} kv heads")
    if head_size & (head_size - 1) or head_size < 16:
        raise ValueError(f"head size {head_size} must be a power of two >= 16")
    if block_table.shape[0] != batch or seq_lens.shape[0] != batch:
        raise ValueError("block_table / seq_lens need one row per sequence")
    for t in (q, k_cache, v_cache):
        if t.stride(-1) != 1:
            raise ValueError("the head dimension must be contiguous")
    out = torch.empty_like(q)
    if batch == 0:
        return out
    group = num_q_heads // num_kv_heads
    capacity = block_table.shape[1] * page_size  # upper bound on any length: no host sync needed
    kv_heads = _kv_heads_per_program(num_kv_heads, k_cache, v_cache)
    tma = _tma_pages(k_cache, v_cache)
    if tma and q.is_cuda:
        triton.set_allocator(_descriptor_scratch)
    shape = _Launch(batch, num_q_heads, num_kv_heads, head_size, page_size, group, kv_heads,
                    max(16, triton.next_power_of_2(kv_heads * group)),
                    page_size if tma else BLOCK_N if capacity >= 4 * BLOCK_N else 16,
                    head_size ** -0.5 * math.log2(math.e), tma)
    if SCHEDULE == "balanced":
        _balanced(q, k_cache, v_cache, block_table, seq_lens, out, shape)
    else:
        _splits(q, k_cache, v_cache, block_table, seq_lens, out, shape)
    return out


@dataclass(frozen=True)
class _Launch:
    batch: int
    q_heads: int
    kv_heads: int
    head_size: int
    page: int
    group: int
    kv_heads_per_program: int
    rows: int  # q tile rows: the program's query heads, padded to the tensor-core M
    block_n: int
    qk_scale: float  # softmax scale times log2(e): scores in log2 units
    tma: bool  # pages through tensor descriptors (BLOCK_N is the page)


def _kv_args(k_cache, v_cache) -> tuple:
    return (k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0),
            v_cache.stride(1), v_cache.stride(2))


def _cache_args(k_cache, shape: _Launch) -> dict:
    """What the kernels need to see a contiguous cache as [pages * page, kv heads * head]."""
    return {"cache_rows": k_cache.shape[0] * shape.page,
            "KV_WIDTH": shape.kv_heads * shape.head_size, "TMA": shape.tma}


def _tma_pages(k_cache, v_cache) -> bool:
    """TMA_PAGES where a page is a bulk copy: contiguous caches, pages of 16 tokens or more
    (the tile's N side), rows of whole 16-byte units."""
    page, row_bytes = k_cache.shape[1], k_cache.shape[2] * k_cache.shape[3] * k_cache.element_size()
    return (TMA_PAGES and k_cache.is_contiguous() and v_cache.is_contiguous() and page >= 16
            and page & (page - 1) == 0 and row_bytes % 16 == 0)


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory where device-side tensor descriptors are written (Triton asks for it)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _splits(q, k_cache, v_cache, block_table, seq_lens, out, shape: _Launch) -> None:
    capacity = block_table.shape[1] * shape.page
    # KV_SPLIT_BLOCK tokens per split at real sizes (uniform programs, ~2% partial traffic); small
    # problems (CPU tests) get several splits per sequence so the merge is exercised.
    split = max(shape.block_n, min(KV_SPLIT_BLOCK, triton.next_power_of_2(
        triton.cdiv(capacity, SPLITS_PER_SEQ))))
    split = triton.cdiv(split, shape.block_n) * shape.block_n
    max_splits = triton.cdiv(capacity, split)
    o_part = torch.empty((shape.batch, shape.q_heads, max_splits, shape.head_size),
                         dtype=torch.float32, device=q.device)
    lse = torch.empty((shape.batch, shape.q_heads, max_splits), dtype=torch.float32,
                      device=q.device)
    columns = shape.kv_heads // shape.kv_heads_per_program
    # one ticket per (sequence, program column): zeroed every call (a memset in the stream)
    tickets = torch.zeros((shape.batch, columns) if FUSED_MERGE else (1,), dtype=torch.int32,
                          device=q.device)
    _paged_decode_split_kernel[(shape.batch, columns, max_splits)](
        q, k_cache, v_cache, block_table, seq_lens, o_part, lse, shape.qk_scale,
        q.stride(0), q.stride(1), *_kv_args(k_cache, v_cache), block_table.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse.stride(0), lse.stride(1),
        out, tickets, out.stride(0), out.stride(1), **_cache_args(k_cache, shape),
        GROUP=shape.group, ROWS=shape.rows, KV_HEADS=shape.kv_heads_per_program,
        HEAD=shape.head_size, PAGE=shape.page, BLOCK_N=shape.block_n, SPLIT=split,
        MAX_SPLITS=triton.next_power_of_2(max_splits), FUSED=FUSED_MERGE, INTERPRET=_INTERPRET,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    if FUSED_MERGE:
        return
    pdl = _use_pdl(q.device)
    heads = min(MERGE_HEADS, triton.next_power_of_2(shape.q_heads))
    _merge_splits_kernel[(shape.batch, triton.cdiv(shape.q_heads, heads))](
        o_part, lse, seq_lens, out, shape.q_heads, o_part.stride(0), o_part.stride(1),
        o_part.stride(2), lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        D=shape.head_size, SPLIT=split, MAX_SPLITS=triton.next_power_of_2(max_splits),
        HEADS=heads, USE_PDL=pdl, num_warps=4, launch_pdl=pdl)


def _balanced_ranges(device: torch.device, columns: int) -> int:
    """Tile ranges: with `columns` programs per range, about SMs x BALANCED_PROGRAMS_PER_SM
    programs in all."""
    if device.type == "cuda" and not _INTERPRET:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return max(1, sms * BALANCED_PROGRAMS_PER_SM // columns)
    return 5  # CPU tests: ranges that cut sequences, and ranges holding several pieces


def _balanced(q, k_cache, v_cache, block_table, seq_lens, out, shape: _Launch) -> None:
    columns = shape.kv_heads // shape.kv_heads_per_program
    ranges = _balanced_ranges(q.device, columns)
    rows = 2 * ranges + shape.batch  # (range, first or last piece); then whole sequences
    o_part = torch.empty((rows, shape.q_heads, shape.head_size), dtype=torch.float32,
                         device=q.device)
    lse = torch.empty((rows, shape.q_heads), dtype=torch.float32, device=q.device)
    batch_pad = triton.next_power_of_2(shape.batch)
    _paged_decode_balanced_kernel[(ranges, columns)](
        q, k_cache, v_cache, block_table, seq_lens, o_part, lse, shape.qk_scale, shape.batch,
        q.stride(0), q.stride(1), *_kv_args(k_cache, v_cache), block_table.stride(0),
        o_part.stride(0), o_part.stride(1), lse.stride(0), **_cache_args(k_cache, shape),
        BATCH=batch_pad, GROUP=shape.group,
        ROWS=shape.rows, KV_HEADS=shape.kv_heads_per_program, HEAD=shape.head_size,
        PAGE=shape.page, BLOCK_N=shape.block_n, INTERPRET=_INTERPRET, num_warps=NUM_WARPS,
        num_stages=NUM_STAGES, maxnreg=BALANCED_MAXNREG)
    pdl = _use_pdl(q.device)
    heads = min(MERGE_HEADS, triton.next_power_of_2(shape.q_heads))
    _merge_pieces_kernel[(shape.batch, triton.cdiv(shape.q_heads, heads))](
        o_part, lse, seq_lens, out, shape.q_heads, shape.batch, ranges, o_part.stride(0),
        o_part.stride(1), lse.stride(0), out.stride(0), out.stride(1), BATCH=batch_pad,
        D=shape.head_size, HEADS=heads, BLOCK_N=shape.block_n, USE_PDL=pdl, num_warps=4,
        launch_pdl=pdl)


class Model(torch.nn.Module):
    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        return paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens)
