"""DeepSeek-V3 MLA paged decode (absorbed form): split-KV Triton kernels aimed at HBM bandwidth.

Every used latent row (c_kv 512 | k_pe 64, 1152 bytes in bf16) is read once and serves all H=16
heads: ~30 FLOPs per byte, still under the H200 ridge (~206 FLOP/B for bf16 tensor cores), so the
target is the memory roofline. Design:
- one program per (sequence, KV split) takes all 16 heads as the M dimension of the tensor-core
  tiles: q is [16, 512] + [16, 64] in registers, and a [BLOCK_N, 512] c_kv tile is loaded ONCE and
  used twice, as K (scores = q_nope c_kv^T + q_pe k_pe^T) and as V (acc += p c_kv);
- pages are 64 tokens and tiles are BLOCK_N (<= 64) tokens aligned to page boundaries, so a tile is
  one page id (a scalar load) and BLOCK_N x 1152 contiguous bytes: fully coalesced, and the
  software pipeline (num_stages) keeps the next tile's loads in flight;
- two schedules (SCHEDULE). "splits": fixed-size KV splits (tokens), one program each; splits
  past a sequence's end exit at once; each writes its normalized [16, 512] fp32 partial and LSE
  (32 KB per split), a second kernel merges. "balanced" (FlashMLA's tile scheduler, no host
  sync): SM count x BALANCED_PROGRAMS_PER_SM programs, each taking an equal range of the row of
  all sequences' tiles laid end to end (prefix sums of the lengths, in the kernel), so the grid
  is one wave of equal work whatever the lengths; a sequence cut between programs leaves one
  partial per piece, a merge kernel combines them;
- online softmax in fp32 with exp2.
On the H200 (NOTES.md): the splits schedule reaches 0.55 (kv2k) / 0.72 (kv8k) of the datasheet
bandwidth; both shapes launch ~1.05 waves of split programs (about 550 programs for 4 resident
per SM), which is the tail the balanced schedule removes. Not yet measured on a GPU: balanced
(176 registers under Triton 3.9's ptxas, so 2 resident programs per SM unless capped with
BALANCED_MAXNREG; 168 spills 20 bytes).
"""

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner can search them).
# Chosen by benchmarks/attention_h200.py on the H200 (results/h200-attention/sweep-2e35075):
# kv2k 59.5 us, kv8k 177.5 us a call; 8 warps (98 registers: 2 programs per SM) was 5-10%
# slower, BLOCK_N 16 up to 45% slower, BLOCK_N 64 with 2 stages 2% faster at kv8k and 8% slower
# at kv2k.
BLOCK_N = 32  # KV tokens per tile (must divide the 64-token page)
SPLITS_PER_SEQ = 16  # the longest possible sequence is cut into about this many splits
MAX_SPLIT_BLOCK = 1024  # max KV tokens per program
NUM_WARPS = 4
NUM_STAGES = 3
FUSED_MERGE = False  # the last split of each sequence merges (no merge kernel); to be swept
# "splits": a program per (sequence, fixed-size split); "balanced": SM count x
# BALANCED_PROGRAMS_PER_SM programs, each the same number of tiles of all sequences laid end to
# end (FlashMLA's schedule: no wave tail whatever the lengths); to be swept
SCHEDULE = "splits"
BALANCED_PROGRAMS_PER_SM = 4
BALANCED_MAXNREG = None  # a register cap (ptxas .maxnreg) for more resident programs; swept
MERGE_HEADS = 1  # heads per program of the merge kernel ([splits, 512] fp32 partials each)
PDL = True  # the merge is launched while the split kernel drains (sm_90+)


@triton.jit
def _mma(a, b, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b)


@triton.jit
def _attend(q_nope, q_pe, kv_ptr, bt_row, start, end, qk_scale, stride_kvp, stride_kvs,
            HEADS: tl.constexpr, D_LATENT: tl.constexpr, D_ROPE: tl.constexpr,
            PAGE: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):
    """Online softmax of all heads over tokens [start, end) of one sequence (start on a tile
    boundary): the running max, sum and unnormalized output."""
    dl = tl.arange(0, D_LATENT)
    dr = tl.arange(0, D_ROPE)
    m_i = tl.full([HEADS], float("-inf"), tl.float32)
    l_i = tl.zeros([HEADS], tl.float32)
    acc = tl.zeros([HEADS, D_LATENT], tl.float32)
    for t0 in range(start, end, BLOCK_N):
        # BLOCK_N divides PAGE and ranges start on tile boundaries: one page per tile.
        page = tl.load(bt_row + t0 // PAGE).to(tl.int64)
        within = (t0 % PAGE) + tl.arange(0, BLOCK_N)
        tmask = t0 + tl.arange(0, BLOCK_N) < end
        rows = kv_ptr + page * stride_kvp + within.to(tl.int64)[:, None] * stride_kvs
        c_kv = tl.load(rows + dl[None, :], mask=tmask[:, None], other=0.0)  # [BLOCK_N, 512]
        k_pe = tl.load(rows + D_LATENT + dr[None, :], mask=tmask[:, None], other=0.0)
        s = _mma(q_nope, tl.trans(c_kv), INTERPRET) + _mma(q_pe, tl.trans(k_pe), INTERPRET)
        s = tl.where(tmask[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _mma(p.to(c_kv.dtype), c_kv, INTERPRET)
        m_i = m_new
    return m_i, l_i, acc


@triton.jit
def _mla_decode_split_kernel(
        q_ptr, kv_ptr, bt_ptr, lens_ptr, o_ptr, lse_ptr, qk_scale, num_heads,
        stride_qb, stride_qh, stride_kvp, stride_kvs, stride_btb,
        stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
        out_ptr, ticket_ptr, stride_outb, stride_outh,
        HEADS: tl.constexpr, D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, PAGE: tl.constexpr,
        BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, MAX_SPLITS: tl.constexpr,
        FUSED: tl.constexpr, INTERPRET: tl.constexpr):
    """FUSED: a sequence of one split stores its output directly; otherwise the split that
    finishes last (a ticket per sequence) merges the partials, from L2."""
    b = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.load(lens_ptr + b)
    start = split * SPLIT
    if start < length:
        end = tl.minimum(start + SPLIT, length)
        h = tl.arange(0, HEADS)
        hmask = h < num_heads
        dl = tl.arange(0, D_LATENT)
        dr = tl.arange(0, D_ROPE)
        q_row = q_ptr + b.to(tl.int64) * stride_qb + h[:, None] * stride_qh
        q_nope = tl.load(q_row + dl[None, :], mask=hmask[:, None], other=0.0)
        q_pe = tl.load(q_row + D_LATENT + dr[None, :], mask=hmask[:, None], other=0.0)
        bt_row = bt_ptr + b.to(tl.int64) * stride_btb
        m_i, l_i, acc = _attend(q_nope, q_pe, kv_ptr, bt_row, start, end, qk_scale, stride_kvp,
                                stride_kvs, HEADS, D_LATENT, D_ROPE, PAGE, BLOCK_N, INTERPRET)
        out = acc / l_i[:, None]
        n_splits = tl.cdiv(length, SPLIT)
        out_rows = out_ptr + b.to(tl.int64) * stride_outb + h[:, None] * stride_outh + dl[None, :]
        if FUSED and n_splits == 1:
            tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=hmask[:, None])
        else:
            o_base = o_ptr + b.to(tl.int64) * stride_ob + split * stride_os
            tl.store(o_base + h[:, None] * stride_oh + dl[None, :], out, mask=hmask[:, None])
            tl.store(lse_ptr + b.to(tl.int64) * stride_lb + h * stride_lh + split,
                     m_i + tl.log2(l_i), mask=hmask)
            if FUSED:
                tl.debug_barrier()  # every thread's partial is written before the ticket
                ticket = tl.atomic_add(ticket_ptr + b, 1, sem="acq_rel", scope="gpu")
                if ticket == n_splits - 1:
                    merged = _merge_rows(o_ptr + b.to(tl.int64) * stride_ob,
                                         lse_ptr + b.to(tl.int64) * stride_lb, h, dl,
                                         hmask[:, None], hmask, n_splits, stride_oh, stride_os,
                                         stride_lh, HEADS, D_LATENT, MAX_SPLITS)
                    tl.store(out_rows, merged.to(out_ptr.dtype.element_ty), mask=hmask[:, None])


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
def _mla_decode_balanced_kernel(
        q_ptr, kv_ptr, bt_ptr, lens_ptr, o_ptr, lse_ptr, qk_scale, num_heads, batch,
        stride_qb, stride_qh, stride_kvp, stride_kvs, stride_btb,
        stride_or, stride_oh, stride_lr, BATCH: tl.constexpr, HEADS: tl.constexpr,
        D_LATENT: tl.constexpr, D_ROPE: tl.constexpr,
        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):
    """Program p takes tiles [p * total // P, (p + 1) * total // P) of the row of all sequences'
    tiles: the same work per program whatever the lengths. A sequence inside the range is
    finished here; a piece of a longer one leaves its partial in slot 0 (the range's first piece)
    or 1 (its last); the merge finishes both (fp32 rows: [2 * P + batch, heads, latent])."""
    p = tl.program_id(0)
    programs = tl.num_programs(0)
    i, firsts, ends, total = _tile_layout(lens_ptr, batch, BATCH, BLOCK_N)
    cur = _range_start(p, total, programs)
    stop = _range_start(p + 1, total, programs)
    h = tl.arange(0, HEADS)
    hmask = h < num_heads
    dl = tl.arange(0, D_LATENT)
    dr = tl.arange(0, D_ROPE)
    piece = 0
    while cur < stop:
        b = tl.sum(tl.where(ends <= cur, 1, 0), axis=0)  # the sequence that holds tile `cur`
        first = _pick(firsts, i, b)
        last = _pick(ends, i, b)
        until = tl.minimum(stop, last)
        q_row = q_ptr + b.to(tl.int64) * stride_qb + h[:, None] * stride_qh
        q_nope = tl.load(q_row + dl[None, :], mask=hmask[:, None], other=0.0)
        q_pe = tl.load(q_row + D_LATENT + dr[None, :], mask=hmask[:, None], other=0.0)
        m_i, l_i, acc = _attend(q_nope, q_pe, kv_ptr, bt_ptr + b.to(tl.int64) * stride_btb,
                                (cur - first) * BLOCK_N,
                                tl.minimum((until - first) * BLOCK_N, tl.load(lens_ptr + b)),
                                qk_scale, stride_kvp, stride_kvs, HEADS, D_LATENT, D_ROPE, PAGE,
                                BLOCK_N, INTERPRET)
        # one store for both cases (two store paths cost ~60 registers): a whole sequence's
        # output to its row after the pieces', a piece's partial to its (program, slot) row
        row = tl.where((cur == first) & (until == last), 2 * programs + b,
                       2 * p + tl.minimum(piece, 1)).to(tl.int64)
        tl.store(o_ptr + row * stride_or + h[:, None] * stride_oh + dl[None, :],
                 acc / l_i[:, None], mask=hmask[:, None])
        tl.store(lse_ptr + row * stride_lr + h, m_i + tl.log2(l_i), mask=hmask)
        cur = until
        piece += 1


@triton.jit
def _merge_pieces_kernel(o_ptr, lse_ptr, lens_ptr, out_ptr, num_heads, batch, programs,
                         stride_or, stride_oh, stride_lr, stride_outb, stride_outh,
                         BATCH: tl.constexpr, D: tl.constexpr,
                         HEADS: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
    """HEADS heads of one sequence that the balanced schedule cut into pieces: the pieces'
    partials, from the programs that hold its tiles in turn, combined by their softmax mass."""
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

def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch for the merge: Hopper and later, never the interpreter."""
    return (PDL and device.type == "cuda" and not _INTERPRET
            and torch.cuda.get_device_capability(device)[0] >= 9)


def mla_paged_decode(q, kv_cache, block_table, seq_lens, kv_lora_rank: int, sm_scale: float):
    batch, num_heads, width = q.shape
    num_pages, page_size, kv_width = kv_cache.shape
    rope_dim = width - kv_lora_rank
    if kv_width != width:
        raise ValueError(f"q width {width} != cache width {kv_width}")
    for n, what in ((kv_lora_rank, "kv_lora_rank"), (rope_dim, "rope dim")):
        if n < 16 or n & (n - 1):
            raise ValueError(f"{what} {n} must be a power of two >= 16")
    if q.stride(-1) != 1 or kv_cache.stride(-1) != 1:
        raise ValueError("the feature dimension must be contiguous")
    block_n = min(BLOCK_N, page_size)
    if page_size % block_n:
        raise ValueError(f"page size {page_size} must be a multiple of {block_n}")
    out = torch.empty((batch, num_heads, kv_lora_rank), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    shape = _Launch(batch, num_heads, kv_lora_rank, rope_dim, page_size, block_n,
                    max(16, triton.next_power_of_2(num_heads)), sm_scale * 1.4426950408889634)
    if SCHEDULE == "balanced":
        _balanced(q, kv_cache, block_table, seq_lens, out, shape)
    else:
        _splits(q, kv_cache, block_table, seq_lens, out, shape)
    return out


@dataclass(frozen=True)
class _Launch:
    batch: int
    num_heads: int
    latent: int
    rope: int
    page: int
    block_n: int
    heads_pad: int
    qk_scale: float  # softmax scale times log2(e): scores in log2 units


def _splits(q, kv_cache, block_table, seq_lens, out, shape: _Launch) -> None:
    capacity = block_table.shape[1] * shape.page
    # ~SPLITS_PER_SEQ splits of the longest possible context, at most MAX_SPLIT_BLOCK tokens,
    # whole pages.
    split = max(shape.page, min(MAX_SPLIT_BLOCK, triton.next_power_of_2(
        triton.cdiv(capacity, SPLITS_PER_SEQ))))
    split = triton.cdiv(split, shape.page) * shape.page
    if capacity < 1024:
        split = shape.page  # small problems (CPU tests): exercise the multi-split merge
    max_splits = triton.cdiv(capacity, split)
    o_part = torch.empty((shape.batch, shape.num_heads, max_splits, shape.latent),
                         dtype=torch.float32, device=q.device)
    lse = torch.empty((shape.batch, shape.num_heads, max_splits), dtype=torch.float32,
                      device=q.device)
    # one ticket per sequence: zeroed every call (a memset in the stream)
    tickets = torch.zeros(shape.batch if FUSED_MERGE else 1, dtype=torch.int32, device=q.device)
    _mla_decode_split_kernel[(shape.batch, max_splits)](
        q, kv_cache, block_table, seq_lens, o_part, lse, shape.qk_scale, shape.num_heads,
        q.stride(0), q.stride(1), kv_cache.stride(0), kv_cache.stride(1),
        block_table.stride(0), o_part.stride(0), o_part.stride(1), o_part.stride(2),
        lse.stride(0), lse.stride(1), out, tickets, out.stride(0), out.stride(1),
        HEADS=shape.heads_pad, D_LATENT=shape.latent, D_ROPE=shape.rope, PAGE=shape.page,
        BLOCK_N=shape.block_n, SPLIT=split, MAX_SPLITS=triton.next_power_of_2(max_splits),
        FUSED=FUSED_MERGE, INTERPRET=_INTERPRET, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    if FUSED_MERGE:
        return
    pdl = _use_pdl(q.device)
    heads = min(MERGE_HEADS, triton.next_power_of_2(shape.num_heads))
    _merge_splits_kernel[(shape.batch, triton.cdiv(shape.num_heads, heads))](
        o_part, lse, seq_lens, out, shape.num_heads, o_part.stride(0), o_part.stride(1),
        o_part.stride(2), lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        D=shape.latent, SPLIT=split, MAX_SPLITS=triton.next_power_of_2(max_splits), HEADS=heads,
        USE_PDL=pdl, num_warps=4, launch_pdl=pdl)


def _balanced_programs(device: torch.device) -> int:
    if device.type == "cuda" and not _INTERPRET:
        return torch.cuda.get_device_properties(device).multi_processor_count * \
            BALANCED_PROGRAMS_PER_SM
    return 5  # CPU tests: ranges that cut sequences, and ranges holding several pieces


def _balanced(q, kv_cache, block_table, seq_lens, out, shape: _Launch) -> None:
    programs = _balanced_programs(q.device)
    rows = 2 * programs + shape.batch  # (program, first or last piece); then whole sequences
    o_part = torch.empty((rows, shape.num_heads, shape.latent), dtype=torch.float32,
                         device=q.device)
    lse = torch.empty((rows, shape.num_heads), dtype=torch.float32, device=q.device)
    batch_pad = triton.next_power_of_2(shape.batch)
    _mla_decode_balanced_kernel[(programs,)](
        q, kv_cache, block_table, seq_lens, o_part, lse, shape.qk_scale, shape.num_heads,
        shape.batch, q.stride(0), q.stride(1), kv_cache.stride(0), kv_cache.stride(1),
        block_table.stride(0), o_part.stride(0), o_part.stride(1), lse.stride(0),
        BATCH=batch_pad, HEADS=shape.heads_pad, D_LATENT=shape.latent, D_ROPE=shape.rope,
        PAGE=shape.page, BLOCK_N=shape.block_n, INTERPRET=_INTERPRET, num_warps=NUM_WARPS,
        num_stages=NUM_STAGES, maxnreg=BALANCED_MAXNREG)
    pdl = _use_pdl(q.device)
    heads = min(MERGE_HEADS, triton.next_power_of_2(shape.num_heads))
    _merge_pieces_kernel[(shape.batch, triton.cdiv(shape.num_heads, heads))](
        o_part, lse, seq_lens, out, shape.num_heads, shape.batch, programs, o_part.stride(0),
        o_part.stride(1), lse.stride(0), out.stride(0), out.stride(1), BATCH=batch_pad,
        D=shape.latent, HEADS=heads, BLOCK_N=shape.block_n,
        USE_PDL=pdl, num_warps=4, launch_pdl=pdl)


class Model(torch.nn.Module):
    def __init__(self, kv_lora_rank: int = 512, sm_scale: float = 0.1352337788608801) -> None:
        super().__init__()
        self.kv_lora_rank = int(kv_lora_rank)
        self.sm_scale = float(sm_scale)

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                seq_lens: torch.Tensor) -> torch.Tensor:
        return mla_paged_decode(q, kv_cache, block_table, seq_lens, self.kv_lora_rank,
                                self.sm_scale)
