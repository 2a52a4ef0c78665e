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
No torch compute in forward: allocations only.
"""

import math
import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner can search them). Chosen by
# benchmarks/attention_h200.py on the H200 (results/h200-attention/sweep-2e35075), decode-b64:
# 109.3 us a call (split kernel 104.1, merge 3.7); BLOCK_N 32 or 128, 3-4 stages and 8 warps
# were 1-10% slower, 4 or 8 splits per sequence within 1%. Round 3 lost (sweep-f7d4861, these
# constants 111.4 us; its code removed): fused merge at best 115.5 us, length-balanced schedule
# 114.6, a page per tile via tensor descriptors 129.7, 2-4 kv heads per program 119.1.
BLOCK_N = 64  # KV tokens per tile
SPLITS_PER_SEQ = 10  # the longest possible sequence is cut into about this many splits
KV_SPLIT_BLOCK = 1024  # max KV tokens per program (split size), a multiple of BLOCK_N
NUM_WARPS = 4
NUM_STAGES = 2
MERGE_HEADS = 8  # query heads per program of the merge kernel (4: +1 us; the old per-head
# merge took 8.1 us, a chain of dependent loads per head)
PDL = True  # the merge is launched while the split kernel drains (sm_90+)
# Round 4 (an H100, results/h100-7402845/attention; 151.4 us with round 3's constants): the kv
# head on the grid's fastest axis (the 8 programs reading the same tokens' 2 KB rows side by
# side) and K/V loaded evict_first (streamed past L2's resident set) took 0.5-1%, splits that are
# not a power of two of the longest context another 1% (10 splits of 4096: 448 tokens, 147.8 us;
# 12-13: 148.6-149.1; 3312 programs at 256 tokens were 5.02 waves of 660 resident slots).
HEADS_FASTEST = True
KV_EVICT = "evict_first"  # "" (the default policy) or "evict_first"
# Round 5: ncu on an H100 (results/h100-36ed5a5/ncu) puts the merge at 5.8 us of the call, at
# 22% of DRAM peak, reading fp32 partials written a few microseconds before that fit L2:
# PARTIAL_EVICT "evict_last" asks L2 to keep them for the merge, MERGE_WARPS spreads a merge
# program's partials over more threads. Timed on an H100 (results/h100-2e6777a/decode): 148.3 us
# before, 144.2 with evict_last, 143.0 with evict_last and 8 merge warps (8 warps alone: 147.1).
PARTIAL_EVICT = "evict_last"  # "" (the default policy) or "evict_last"
MERGE_WARPS = 8
# Round 5 too: the split kernel's top stall is the gathered loads (ncu). OFFSET_32
# keeps the gathered rows' offsets in 32 bits where both caches reach under 2^31 elements;
# SAME_KV_OFFSETS computes one offset vector for K and V when their strides agree (Triton cannot
# know they do). ptxas (sm_90a) under the device's Triton 3.6: 96 registers with neither or both
# (both: 1,500 PTX lines against 1,601, fewer 64-bit conversions), 162 with SAME_KV_OFFSETS alone;
# under Triton 3.9: 103 with neither, 90 / 96 with OFFSET_32 / SAME_KV_OFFSETS alone, 80 with both.
# Timed on an H100 (results/h100-2e6777a/decode): 146.4-149.4 us for all four, 148.0 with
# neither: no gain beyond the noise, so both stay off.
OFFSET_32 = False
SAME_KV_OFFSETS = False


@triton.jit
def _mma(a, b, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b)


@triton.jit
def _paged_decode_split_kernel(
        q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, o_ptr, lse_ptr, qk_scale,
        stride_qb, stride_qh, stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
        stride_btb, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
        GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD: tl.constexpr, PAGE: tl.constexpr,
        BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, HEADS_FASTEST: tl.constexpr,
        KV_EVICT: tl.constexpr, PARTIAL_EVICT: tl.constexpr, OFFSET_32: tl.constexpr,
        SAME_KV_OFFSETS: tl.constexpr, INTERPRET: tl.constexpr):
    """Tokens [split * SPLIT, +SPLIT) of one sequence for the GROUP query heads of one kv head:
    an online softmax over page-gathered K/V tiles, then the normalized partial and its LSE."""
    if HEADS_FASTEST:
        kvh = tl.program_id(0)
        b = tl.program_id(1)
    else:
        b = tl.program_id(0)
        kvh = tl.program_id(1)
    split = tl.program_id(2)
    length = tl.load(lens_ptr + b)
    start = split * SPLIT
    if start < length:
        end = tl.minimum(start + SPLIT, length)
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, HEAD)
        heads = kvh * GROUP + g
        gmask = g < GROUP
        q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + d[None, :],
                    mask=gmask[:, None], other=0.0)
        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD], tl.float32)
        bt_row = bt_ptr + b.to(tl.int64) * stride_btb
        for t0 in range(start, end, BLOCK_N):
            t = t0 + tl.arange(0, BLOCK_N)
            tmask = t < end
            page = tl.load(bt_row + t // PAGE, mask=tmask, other=0)
            within = t % PAGE
            if not OFFSET_32:
                page = page.to(tl.int64)
                within = within.to(tl.int64)
            k_off = page * stride_kp + within * stride_ks + kvh * stride_kh
            k = tl.load(k_ptr + k_off[:, None] + d[None, :], mask=tmask[:, None], other=0.0,
                        eviction_policy=KV_EVICT)
            s = _mma(q, tl.trans(k), INTERPRET) * qk_scale  # [GROUP_PAD, BLOCK_N], log2 units
            s = tl.where(tmask[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if SAME_KV_OFFSETS:
                v_off = k_off
            else:
                v_off = page * stride_vp + within * stride_vs + kvh * stride_vh
            v = tl.load(v_ptr + v_off[:, None] + d[None, :], mask=tmask[:, None], other=0.0,
                        eviction_policy=KV_EVICT)
            acc = acc * alpha[:, None] + _mma(p.to(v.dtype), v, INTERPRET)
            m_i = m_new
        out = acc / l_i[:, None]
        o_base = o_ptr + b.to(tl.int64) * stride_ob + split * stride_os
        tl.store(o_base + heads[:, None] * stride_oh + d[None, :], out, mask=gmask[:, None],
                 eviction_policy=PARTIAL_EVICT)
        tl.store(lse_ptr + b.to(tl.int64) * stride_lb + heads * stride_lh + split,
                 m_i + tl.log2(l_i), mask=gmask)


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


def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch for the merge: Hopper and later, never the interpreter."""
    return (PDL and device.type == "cuda" and not _INTERPRET
            and torch.cuda.get_device_capability(device)[0] >= 9)


def _max_offset(t: torch.Tensor) -> int:
    """The largest element offset a view reaches from its first element (views of a wider cache,
    e.g. K and V halves of one [pages, 2, page, heads, dim] tensor, reach past their numel)."""
    return sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))


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
    block_n = BLOCK_N if capacity >= 4 * BLOCK_N else 16
    # About capacity / SPLITS_PER_SEQ tokens per split, a whole number of tiles, at most
    # KV_SPLIT_BLOCK (uniform programs, ~1-2% partial traffic); small problems (CPU tests) get
    # several splits per sequence so the merge is exercised.
    split = max(block_n, min(KV_SPLIT_BLOCK, triton.cdiv(capacity, SPLITS_PER_SEQ)))
    split = triton.cdiv(split, block_n) * block_n
    max_splits = triton.cdiv(capacity, split)
    o_part = torch.empty((batch, num_q_heads, max_splits, head_size), dtype=torch.float32,
                         device=q.device)
    lse = torch.empty((batch, num_q_heads, max_splits), dtype=torch.float32, device=q.device)
    qk_scale = head_size ** -0.5 * math.log2(math.e)  # scores in log2 units
    grid = ((num_kv_heads, batch) if HEADS_FASTEST else (batch, num_kv_heads)) + (max_splits,)
    _paged_decode_split_kernel[grid](
        q, k_cache, v_cache, block_table, seq_lens, o_part, lse, qk_scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse.stride(0), lse.stride(1),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD=head_size,
        PAGE=page_size, BLOCK_N=block_n, SPLIT=split, HEADS_FASTEST=HEADS_FASTEST,
        KV_EVICT=KV_EVICT, PARTIAL_EVICT=PARTIAL_EVICT,
        OFFSET_32=OFFSET_32 and max(_max_offset(k_cache), _max_offset(v_cache)) < 2**31,
        SAME_KV_OFFSETS=SAME_KV_OFFSETS and k_cache.stride() == v_cache.stride(),
        INTERPRET=_INTERPRET, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    pdl = _use_pdl(q.device)
    heads = min(MERGE_HEADS, triton.next_power_of_2(num_q_heads))
    _merge_splits_kernel[(batch, triton.cdiv(num_q_heads, heads))](
        o_part, lse, seq_lens, out, num_q_heads, o_part.stride(0), o_part.stride(1),
        o_part.stride(2), lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        D=head_size, SPLIT=split, MAX_SPLITS=triton.next_power_of_2(max_splits), HEADS=heads,
        USE_PDL=pdl, num_warps=MERGE_WARPS, launch_pdl=pdl)
    return out


class Model(torch.nn.Module):
    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        return paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens)
